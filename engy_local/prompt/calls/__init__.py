"""The grammars of what an answer must be: a forced call (forced.py), calls
a model starts under auto (autocall.py), and an answer in a format
(answerformat.py). Built on families/ and grammar/.
"""
