"""`engy chat` with images, driven in a real terminal: `/image PATH` and a
path typed as the whole message attach an image to the next message; the
tiny model that sees colours names the colour. A model without a projector
says so in one line."""

from __future__ import annotations

import re
from pathlib import Path

from support.images import BLUE, RED, png
from support.paths import ANSWER
from support.server import EngyServer
from support.terminal import Terminal

# The spinner's words stay in the raw capture, glued to what overwrote them
# ("processing the promptred"): drop them before looking at the answer.
_SPINNER = re.compile(r"[\u2800-\u28ff] (?:waiting|processing the prompt|loading model\.\.\.)")


def answer_of(out: str) -> str:
    return _SPINNER.sub(" ", out)


def test_an_image_goes_with_the_next_message(
    tiny_vision: tuple[Path, Path],
    tmp_path: Path,
    terminals: list[Terminal],
) -> None:
    model, projector = tiny_vision
    red, blue = tmp_path / "red.png", tmp_path / "a blue.png"
    red.write_bytes(png(RED))
    blue.write_bytes(png(BLUE))
    term = Terminal(str(model), "--mmproj", str(projector), home=tmp_path / "home")
    terminals.append(term)

    out = term.run(f"/image {red}")
    assert "image red.png" in out and "goes with your next message" in out
    out = term.run("What colour is this?")
    # (the answer is " red"; markdown rendering may drop its leading space)
    assert re.search(r"\bred\b", answer_of(out)) and ANSWER not in out

    assert "conversation cleared" in term.run("/clear")
    # A dropped file arrives as its path, quoted: it is attached, not sent
    # (nor taken for a command by its leading slash).
    out = term.run(f"'{blue}'")
    assert "image a blue.png" in out
    assert re.search(r"\bblue\b", answer_of(term.run("And this one?")))

    out = term.run(f"/image {tmp_path / 'missing.png'}")
    assert "error: cannot read" in out
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    assert "is not a PNG, JPEG, GIF or WebP image" in term.run(f"/image {notes}")
    term.run("/clear")  # the blue image is in the conversation: it would still be seen
    assert ANSWER in term.run("Hi")  # the session goes on, no image attached
    assert "/image PATH" in term.run("/help")
    assert term.leave() == 0


def test_a_model_without_a_projector_says_so(
    tiny_answer: Path,
    tmp_path: Path,
    terminals: list[Terminal],
) -> None:
    red = tmp_path / "red.png"
    red.write_bytes(png(RED))
    term = Terminal(str(tiny_answer), home=tmp_path / "home")
    terminals.append(term)
    out = term.run(f"/image {red}")
    errors = [line for line in out.splitlines() if "error:" in line]
    assert len(errors) == 1 and "takes no images" in errors[0]
    # Its path alone (an absolute one, as a terminal writes a dropped file) too.
    out = term.run(str(red))
    assert "takes no images" in out and ANSWER not in out
    assert ANSWER in term.run("Hi")
    assert term.leave() == 0


def test_an_image_goes_through_a_running_server_too(
    tiny_vision: tuple[Path, Path],
    tmp_path: Path,
    terminals: list[Terminal],
) -> None:
    model, projector = tiny_vision
    server = EngyServer(str(model), "--mmproj", str(projector), "--ctx-size", "4096")
    try:
        blue = tmp_path / "blue.png"
        blue.write_bytes(png(BLUE))
        term = Terminal("--url", server.url, home=tmp_path / "home")
        terminals.append(term)
        assert "goes with your next message" in term.run(f"/image {blue}")
        assert re.search(r"\bblue\b", answer_of(term.run("What colour?")))
        assert term.leave() == 0
    finally:
        server.stop()
