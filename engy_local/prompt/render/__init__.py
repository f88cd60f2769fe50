"""Rendering a conversation: chat templates in a sandbox (template.py),
neutral messages as templates take them (messages.py), where images go
(images.py) and where each part of the prompt lies (layout.py). Imports
parsing/ and grammar/.
"""
