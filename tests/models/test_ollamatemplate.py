"""Ollama's Go templates mapped to the family's chat template: each format
Ollama's library writes is recognised by its markers on the architectures it
is used on, the mapped template renders what the model's own does (Qwen2.5's
real template, token for token), and the params layer gives the defaults."""

from __future__ import annotations

import pytest
from support.families.prompts import prepared, source

from engy_local.chat import Message, Text, ToolCall, ToolResult, ToolSpec
from engy_local.models.ollamatemplate import (
    QWEN_SYSTEM,
    map_template,
    read_params,
    unknown_template,
)
from engy_local.prompt.families import detect
from engy_local.prompt.render.template import ChatTemplate

# Go templates in the shape Ollama's library writes them: the lines that
# carry each format's markers, with the .Messages loop around them.
QWEN25 = (
    "{{- if .Messages }}{{- if or .System .Tools }}<|im_start|>system\n"
    "{{- if .System }}\n{{ .System }}\n{{- else }}\n" + QWEN_SYSTEM + "\n{{- end }}\n"
    "{{- if .Tools }}\n\n# Tools\n<tools>\n{{- range .Tools }}\n"
    '{"type": "function", "function": {{ .Function }}}\n{{- end }}\n</tools>\n'
    "<tool_call>\n{{- end }}<|im_end|>\n{{ end }}\n"
    '{{- range $i, $_ := .Messages }}{{- if eq .Role "user" }}<|im_start|>user\n'
    "{{ .Content }}<|im_end|>\n"
    '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n{{ if .Content }}{{ .Content }}'
    "{{- else if .ToolCalls }}<tool_call>\n{{ range .ToolCalls }}"
    '{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}\n'
    "{{ end }}</tool_call>{{- end }}<|im_end|>\n"
    '{{- else if eq .Role "tool" }}<|im_start|>user\n<tool_response>\n{{ .Content }}\n'
    "</tool_response><|im_end|>\n{{ end }}{{- end }}<|im_start|>assistant\n{{ end }}"
)
CHATML = (
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
    "<|im_start|>assistant\n"
)
LLAMA31 = (
    "{{- if or .System .Tools }}<|start_header_id|>system<|end_header_id|>\n"
    "{{- if .System }}\n\n{{ .System }}{{- end }}<|eot_id|>{{- end }}\n"
    "{{- range $i, $_ := .Messages }}"
    '{{- if eq .Role "user" }}<|start_header_id|>user<|end_header_id|>\n\n'
    "{{- if and $.Tools $last }}Given the following functions, please respond with a JSON "
    "for a function call with its proper arguments that best answers the given prompt.\n"
    "{{ range $.Tools }}{{- . }}\n{{ end }}{{ .Content }}<|eot_id|>{{- end }}"
    '{{- else if eq .Role "tool" }}<|start_header_id|>ipython<|end_header_id|>\n\n'
    "{{ .Content }}<|eot_id|>{{- end }}{{- end }}"
)
LLAMA3 = (
    "{{ range .Messages }}<|start_header_id|>{{ .Role }}<|end_header_id|>\n\n"
    "{{ .Content }}<|eot_id|>{{ end }}<|start_header_id|>assistant<|end_header_id|>\n\n"
)
GEMMA = (
    '{{- range $i, $_ := .Messages }}{{- if or (eq .Role "user") (eq .Role "system") }}'
    "<start_of_turn>user\n{{ .Content }}<end_of_turn>\n"
    '{{ else if eq .Role "assistant" }}<start_of_turn>model\n{{ .Content }}<end_of_turn>\n'
    "{{ end }}{{- end }}<start_of_turn>model\n"
)
MISTRAL = (
    '{{- range $index, $_ := .Messages }}{{- if eq .Role "user" }}[INST] '
    '{{ .Content }}{{- else if eq .Role "assistant" }}[/INST] {{ .Content }}</s>'
    "{{- end }}{{- end }}[/INST]"
)
LLAMA2 = "[INST] <<SYS>>{{ .System }}<</SYS>>\n\n{{ .Prompt }} [/INST]"
PHI3 = "{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}<|end|>\n{{ end }}<|assistant|>\n"
ALPACA = "{{ .System }}\n\n### Instruction:\n{{ .Prompt }}\n\n### Response:\n"

MAPPED = [
    # go template, GGUF architecture, format, family the mapped template speaks
    (QWEN25, "qwen2", "chatml-tools", "hermes"),
    (QWEN25, "llama", "chatml-tools", "hermes"),  # Hermes 3 on Llama
    (CHATML, "qwen2", "chatml", "generic"),
    (LLAMA31, "llama", "llama3-tools", "llama3"),
    (LLAMA3, "llama", "llama3", "generic"),
    (GEMMA, "gemma3", "gemma", "generic"),
    (MISTRAL, "llama", "mistral", "generic"),
    (PHI3, "phi3", "phi3", "generic"),
]


@pytest.mark.parametrize(("go", "arch", "name", "family"), MAPPED)
def test_a_go_template_maps_to_its_format_and_family(
    go: str, arch: str, name: str, family: str
) -> None:
    mapped = map_template(go, arch)
    assert mapped is not None and mapped.format.name == name
    assert detect(mapped.source).name == family
    ChatTemplate(mapped.source)  # compiles


@pytest.mark.parametrize(
    ("go", "arch"),
    [
        (ALPACA, "llama"),  # a format engy has no template for
        (LLAMA2, "llama"),  # [INST] with <<SYS>>: Llama 2's, not Mistral's
        (GEMMA, "qwen2"),  # the markers on an architecture they are not used on
        (CHATML, None),  # no architecture in the GGUF
        ("", "qwen2"),
    ],
)
def test_what_is_not_a_known_format_is_not_mapped(go: str, arch: str | None) -> None:
    assert map_template(go, arch) is None


def test_the_error_for_an_unknown_template_names_the_model_and_the_way_out() -> None:
    message = unknown_template("ollama:alpaca:7b")
    assert "ollama:alpaca:7b" in message and "chat_template" in message


TOOL = ToolSpec("get_weather", "Weather of a city", {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
})  # fmt: skip
CONVERSATIONS = {
    "plain": (Message("user", (Text("hi"),)),),
    "system": (Message("system", (Text("Be brief."),)), Message("user", (Text("hi"),))),
    "tool round": (
        Message("system", (Text("Be brief."),)),
        Message("user", (Text("Weather in Paris?"),)),
        Message("assistant", (ToolCall("c1", "get_weather", '{"city": "Paris"}'),)),
        Message("tool", (ToolResult("c1", "sunny"),)),
        Message("assistant", (Text("Sunny."),)),
        Message("user", (Text("And Rome?"),)),
    ),
    "said and called": (
        Message("user", (Text("Weather in Paris and Rome?"),)),
        Message("assistant", (
            Text("Checking."),
            ToolCall("c1", "get_weather", '{"city": "Paris"}'),
            ToolCall("c2", "get_weather", '{"city": "Rome"}'),
        )),
        Message("tool", (ToolResult("c1", "sunny"),)),
        Message("tool", (ToolResult("c2", "rain"),)),
    ),
}  # fmt: skip


@pytest.mark.parametrize("conversation", list(CONVERSATIONS))
@pytest.mark.parametrize("with_tools", [False, True])
def test_qwen25_s_mapped_template_renders_what_its_own_does(
    conversation: str, with_tools: bool
) -> None:
    """Qwen2.5 from Ollama's library with no template in its GGUF gets the
    prompt its real template (in the GGUFs Qwen publishes) makes."""
    real = ChatTemplate(source("Qwen-Qwen2.5-7B-Instruct.jinja"))
    mapped = map_template(QWEN25, "qwen2")
    assert mapped is not None
    ours = ChatTemplate(mapped.source)
    messages, tools = CONVERSATIONS[conversation], (TOOL,) if with_tools else ()
    assert prepared(ours, "hermes", messages, tools) == prepared(real, "hermes", messages, tools)


@pytest.mark.parametrize(("go", "arch", "name", "family"), MAPPED)
def test_each_mapped_template_renders_a_tool_round_in_its_turns(
    go: str, arch: str, name: str, family: str
) -> None:
    """Every turn of a conversation with a call and its result is in the
    prompt, in order, ending where the model answers (Mistral's system text
    opens the last user turn, as its own templates put it)."""
    mapped = map_template(go, arch)
    assert mapped is not None
    chat = ChatTemplate(mapped.source, bos_token="<s>", eos_token="</s>")
    text = prepared(chat, detect(mapped.source), CONVERSATIONS["tool round"], (TOOL,))
    pieces = ["Be brief.", "Weather in Paris?", "sunny", "And Rome?"]
    if name == "mistral":
        pieces = [*pieces[1:3], "Be brief.", "And Rome?"]
    at = [text.find(piece) for piece in pieces]
    assert -1 not in at and at == sorted(at), text
    assert "get_weather" in text
    opens = {
        "chatml-tools": "<|im_start|>assistant\n",
        "chatml": "<|im_start|>assistant\n",
        "llama3-tools": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "gemma": "<start_of_turn>model\n",
        "mistral": "[/INST]",
        "phi3": "<|assistant|>\n",
    }
    assert text.endswith(opens[name]), text[-200:]


def test_the_params_layer_gives_stop_words_and_sampling_defaults() -> None:
    params = read_params(
        '{"stop": ["<|im_start|>", "<|im_end|>", "<|im_end|>"], "temperature": 0.7,'
        ' "top_p": 0.8, "top_k": 20, "num_ctx": 4096, "repeat_penalty": 1.05}'
    )
    assert params.stop == ("<|im_start|>", "<|im_end|>")
    assert (params.temperature, params.top_p, params.top_k) == (0.7, 0.8, 20)


@pytest.mark.parametrize(
    "text", ["", "not json", "[1, 2]", '{"stop": 3, "temperature": "hot", "top_k": true}']
)
def test_a_params_layer_engy_cannot_read_gives_no_defaults(text: str) -> None:
    params = read_params(text)
    assert params.stop == () and params.temperature is None and params.top_k is None
