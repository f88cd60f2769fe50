"""A chat template comes with the model file, so it is hostile until proven
otherwise: it cannot reach Python internals, and a render that loops or
builds a huge string is a clear 400-style error within a bounded time."""

from __future__ import annotations

import time

import pytest

from engy_local.errors import InvalidRequest
from engy_local.prompt.render.template import ChatTemplate

HI = [{"role": "user", "content": "hi"}]

# Published Jinja template-injection (SSTI) payloads: each either fails as
# unsafe or renders nothing that reveals or reaches an internal object.
SSTI = [
    ("class mro subclasses", "{{ ''.__class__.__mro__[1].__subclasses__() }}"),
    ("cycler globals os", "{{ cycler.__init__.__globals__.os.popen('id').read() }}"),
    ("joiner globals", "{{ joiner.__init__.__globals__ }}"),
    ("lipsum globals", "{{ lipsum.__globals__['os'].popen('id').read() }}"),
    ("namespace globals", "{{ namespace.__init__.__globals__ }}"),
    ("template reference context", "{{ self._TemplateReference__context }}"),
    ("attr filter", "{{ ''|attr('__class__')|attr('__mro__') }}"),
    ("attr filter escaped", "{{ ''|attr('\\x5f\\x5fclass\\x5f\\x5f') }}"),
    ("format field", "{{ '{0.__class__.__mro__}'.format('') }}"),
    ("format_map", "{{ '{x.__class__}'.format_map({'x': ''}) }}"),
    ("list base", "{{ messages.__class__.__base__.__subclasses__() }}"),
    ("helper globals", "{{ raise_exception.__globals__ }}"),
    ("bound method self", "{{ (messages|first).items.__self__.__class__ }}"),
    ("request config", "{{ config.items() }}{{ request.application }}"),
    ("getitem dunder", "{{ ''['__class__'] }}"),
    ("dict pop internals", "{{ {}.__class__.__subclasses__() }}"),
    ("string formatter", "{{ '%s'|format(''.__class__) }}"),
    ("allowed list method's owner", "{{ messages.pop.__self__.__class__ }}"),
]


@pytest.mark.parametrize("source", [c[1] for c in SSTI], ids=[c[0] for c in SSTI])
def test_template_injection_payloads_reach_nothing(source: str) -> None:
    template = ChatTemplate(source)
    try:
        out = template.render(HI)
    except InvalidRequest as exc:
        assert "chat template" in exc.message
        return
    for leak in ("<class", "<module", "<function", "<built-in", "uid=", "frame", "os."):
        assert leak not in out, out


# (case, template, the error's words)
LIMITS = [
    (
        "nested loop without output",
        "{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}",
        "took over",
    ),
    ("string repeated", "{{ 'x' * 1000000000 }}", "too large"),
    ("list repeated", "{{ ([0] * 1000000000)|length }}", "too large"),
    ("huge power", "{{ 7 ** 100000000 }}", "too large"),
    ("padding", "{{ 'a'.ljust(1000000000) }}", "too large"),
    ("format width", "{{ '{:>999999999}'.format('a') }}", "too large"),
    ("output grows", "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "output over"),
    (
        "macro recursion",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "chat template",
    ),
]


@pytest.mark.parametrize(("source", "words"), [c[1:] for c in LIMITS], ids=[c[0] for c in LIMITS])
def test_runaway_templates_fail_fast(source: str, words: str) -> None:
    template = ChatTemplate(source, seconds=1.0, max_output=10_000_000)
    started = time.monotonic()
    with pytest.raises(InvalidRequest) as caught:
        template.render(HI)
    assert words in caught.value.message
    assert time.monotonic() - started < 20  # seconds, on a slow shared machine


def test_limits_leave_real_templates_alone() -> None:
    template = ChatTemplate(
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}",
        seconds=1.0,
        max_output=1000,
    )
    for _ in range(50):  # the watchdog never fires into a later render
        assert template.render(HI) == "<|user|>hi\n"
    time.sleep(1.2)
    assert template.render(HI) == "<|user|>hi\n"
