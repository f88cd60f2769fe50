"""Grammars: what a model may write, as llama.cpp's GBNF.

A JSON Schema reduced to what a grammar holds exactly (reduce.py) and
compiled (schema.py; numbers.py and stringformats.py for bounds and
formats), a freeform tool's Lark grammar or regex (lark.py, regex.py), GBNF
text (gbnf.py), and the check of an answer against what no grammar holds
(answercheck.py). Pure text; imports only chat and errors.
"""
