"""The error hierarchy: every error opspec raises derives from `OpspecError`.

Each concrete error is also a `ValueError` or a `TypeError`, as PyTorch users expect.
"""

from __future__ import annotations


class OpspecError(Exception):
    """Base class of every error opspec raises."""


class SpecError(OpspecError, ValueError):
    """A spec (or a manifest) is malformed; raised only where a caller asked for it."""


class ExpressionError(OpspecError, ValueError):
    """An expression string is outside the expression language or fails to kind-check.

    `check` is the diagnostic id (`parse`, `language`, `rejected-form`, `kind`, `name`),
    `hint` an optional rewrite that the user can apply.
    """

    def __init__(self, message: str, *, check: str = "language", hint: str | None = None,
                 col: int | None = None):
        super().__init__(message)
        self.message = message
        self.check = check
        self.hint = hint
        self.col = col


class EvaluationError(OpspecError, ValueError):
    """Evaluating an expression failed: a primitive outside its domain, a bad operand."""


class SignatureError(OpspecError, ValueError):
    """A call or a construction violates a declaration of the op's signature."""


class NoCallError(OpspecError, RuntimeError):
    """A call record was asked for before any call completed."""


class SignatureTypeError(OpspecError, TypeError):
    """A call passes an argument of the wrong Python type (not a tensor, a wrong param type)."""


class SpecWarning(UserWarning):
    """A spec an op class uses loaded with problems that lenient loading let through (an
    unknown key, which was ignored): shown once per class when the class is defined."""
