"""`engy launch CLIENT`: a coding agent on a local model in one command.

clients.py  where the client is, its version, the package that works
server.py   the running engy on --host/--port, or one started here
claude.py   Claude Code's environment for the model as loaded
codex.py    Codex's -c overrides and engy's own model catalog file
setup.py    Context in, Setup out: what each other client's configure() takes
opencode.py (and Kilo), qwen.py, cline.py, continuecli.py, aider.py,
miniswe.py  each client's config, written into the launch's temporary directory
profile.py  --tools auto|lean|full: the rule that picks a profile per model
run.py      launch(): all of it, then the client, then cleaning up
"""

from ...errors import LaunchError
from .run import LaunchOptions, launch

__all__ = ["LaunchError", "LaunchOptions", "launch"]
