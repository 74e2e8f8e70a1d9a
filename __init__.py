"""opspec: a constraint-solver-backed validator and runtime for PyTorch operators.

An operator's contract is written once, as a YAML spec. `opspec.schema` reads it,
`opspec.solver` proves it sound with Z3, and `opspec.ops` runs it.
"""

from opspec.schema.errors import OpspecError

__version__ = "0.1.0"

__all__ = ["OpspecError", "__version__"]
