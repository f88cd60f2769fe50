"""A prompt that starts like one read before is tokenized from its last
shared special token on (runtime/tokenizing.py): the tokens are exactly
llama.cpp's reading of the whole text, on real vocabularies (BPE and SPM,
whose space prefix after a special token is the case a cut must keep)
with their real chat templates, and only the rest is read again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.grammar import FIXTURES

from engy_local.prompt.render.template import ChatTemplate
from engy_local.runtime.cache.slots import common_prefix
from engy_local.runtime.loading.model import tokenize_text
from engy_local.runtime.loading.tokenizing import MIN_REUSE, PrefixTokenizer
from engy_local.runtime.loading.vocab import Vocabulary

TEMPLATES = FIXTURES / "chat-templates"
SPM_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]"
    "{{ eos_token }}{% endfor %}"
)
CASES = {  # vocabulary: its model's chat template
    "qwen2": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "gemma-4": "google-gemma-4-31B-it.jinja",
    "llama-bpe": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "llama-spm": None,
}

# Text that tokenizes differently at every kind of boundary: runs of
# spaces, newlines, digits, accents, emoji, markup.
FILLER = "\n".join(
    f"  line {i}:\tcafé  naïve {i * 37 % 101} <b>bold</b> 🙂 x={i}.5; " + "ab " * (i % 5)
    for i in range(60)
)


@pytest.fixture(scope="module", params=list(CASES))
def vocab(request: pytest.FixtureRequest) -> Iterator[Vocabulary]:
    path = FIXTURES / "vocab" / f"ggml-vocab-{request.param}.gguf"
    name = CASES[request.param]
    if not path.is_file() or (name and not (TEMPLATES / name).is_file()):
        pytest.skip(f"fixture not found: {path} or {name}")
    source = (TEMPLATES / name).read_text() if name else SPM_TEMPLATE
    v = Vocabulary(path, chat_template=source)
    yield v
    v.close()


def render(v: Vocabulary, messages: list[dict[str, str]]) -> str:
    template = ChatTemplate(v.template.source, bos_token=v.bos_text, eos_token=v.eos_text)
    return template.render(messages, add_generation_prompt=True)


def whole(v: Vocabulary, text: str) -> list[int]:
    return tokenize_text(v._vocab, text, v.add_bos, v.bos_text)


def test_each_turn_reads_as_the_whole_text_would(
    vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[int] = []  # characters llama.cpp was given, a call each
    tokenize = vocab._tokenize_whole

    def counted(text: str, first: bool) -> list[int]:
        read.append(len(text))
        return tokenize(text, first)

    monkeypatch.setattr(vocab, "_tokenize_whole", counted)
    turn1 = [{"role": "system", "content": FILLER}, {"role": "user", "content": "Fix it. " * 3}]
    answer = {"role": "assistant", "content": " Done:  café\n"}
    turn2 = [*turn1, answer, {"role": "user", "content": "🙂 again"}]
    edited = [turn1[0], {"role": "user", "content": "Something else entirely."}]
    other = [{"role": "user", "content": FILLER[::-1]}]
    texts = [render(vocab, m) for m in (turn1, turn2, turn2, edited, other)]
    texts.append(texts[1] + " trailing")  # the generation prompt's end, then more
    shares = []  # of each text, what llama.cpp read
    for text in texts:
        read.clear()
        assert vocab.tokenize(text) == whole(vocab, text)
        shares.append(sum(read) / len(text))
    # The first reading from a cut was checked against a whole one, and held.
    assert vocab._prefixes is not None and vocab._prefixes._checked is True
    assert shares[0] == pytest.approx(1.0, abs=0.01)  # nothing read before
    assert shares[1] > 1  # the check: the rest, then the whole again
    assert shares[2] < 0.1 and shares[5] < 0.1  # a turn read again, one with more
    assert shares[3] < 0.1  # an edit after the system prompt
    assert shares[4] == pytest.approx(1.0, abs=0.01)  # another conversation: whole
    assert common_prefix(texts[1], texts[5]) >= MIN_REUSE


def test_a_vocabulary_a_cut_reads_otherwise_is_read_whole_from_then_on() -> None:
    """Where reading from a cut gives other tokens than the whole text (a
    vocabulary whose pieces depend on more than the special token before
    them), the check on the first such reading catches it: that prompt and
    every later one are read whole."""
    calls: list[bool] = []

    def whole(text: str, first: bool) -> list[int]:
        calls.append(first)
        # One token a character, "|" special; a piece read alone gets a mark.
        return ([] if first else [0]) + [ord(c) for c in text]

    tokenizer = PrefixTokenizer(whole, lambda t: "|" if t == ord("|") else None)
    start = "a" * MIN_REUSE + "|"
    for text in (start + "b", start + "bc", start + "bcd"):
        calls.clear()
        assert tokenizer.tokenize(text) == [ord(c) for c in text]
    assert tokenizer._checked is False
    assert calls == [True]  # read whole, no cut tried
