"""The IFEval instruction family: the 25 active instruction ids, strict and loose, as checkers."""
