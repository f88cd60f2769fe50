"""The prompt half: a neutral request into prompt tokens, generated text
back into neutral events. Never imports llama.cpp.

Its parts, each importing only those above it in this list (and grammar/):
- parsing/: incremental output parsers (tool calls, JSON, Python arguments)
  and the step from tokens to events;
- render/: chat templates in a sandbox, messages as templates take them,
  images' places, where each part of a prompt lies;
- families/: one module per tool-call family;
- calls/: the grammars of forced calls, calls under auto, answer formats;
- prepare.py, nextturn.py, hfvocab.py: a request prepared for an engine.
"""
