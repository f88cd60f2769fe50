"""Reading what a model writes, a piece at a time: JSON a character at a
time (jsonscan.py), tool calls in each family's syntax (toolparse.py),
Python keyword arguments (pyargs.py), calls written outside the family's
syntax (loosecalls.py), token ids to text with stops (detokenize.py) and
text to the answer's events (assemble.py). Imports grammar/ only.
"""
