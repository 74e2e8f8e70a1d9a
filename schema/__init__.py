"""The spec language: models, diagnostics, errors and the YAML loader.

Only what users call is named here; `opspec.schema` imports neither torch nor z3.
"""

from .diagnostics import CHECK_IDS, DIFF_CHECK_IDS, PROVE_CHECK_IDS, Diagnostic, Pos, Severity
from .errors import (EvaluationError, ExpressionError, OpspecError, SignatureError,
                     SignatureTypeError, SpecError, SpecWarning)
from .loader import LoadedSpec, Manifest, load_paths
from .models import OpSpec, TypesFile
from .yaml_source import SourceMap, YamlError, load_yaml

__all__ = [
    "CHECK_IDS", "DIFF_CHECK_IDS", "Diagnostic", "EvaluationError", "ExpressionError",
    "LoadedSpec", "Manifest", "OpSpec", "OpspecError", "PROVE_CHECK_IDS", "Pos", "Severity",
    "SignatureError", "SignatureTypeError", "SourceMap", "SpecError", "SpecWarning", "TypesFile",
    "YamlError",
    "load_paths", "load_yaml",
]
