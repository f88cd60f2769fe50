"""`python -m engy_local ...` is `engy ...`."""

from .commands.cli import main

main()
