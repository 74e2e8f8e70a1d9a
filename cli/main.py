"""The `opspec` command: load, prove, schema, explain, bench.

Exit status: 0 when no diagnostic is an error, 1 when one is, 2 for a usage error or an
input that cannot be read. The prover is imported only by the commands that prove, so
`load` and `schema` run without z3.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from opspec import __version__
from opspec.schema.errors import SpecError
from opspec.schema.loader import Manifest, load_paths
from opspec.schema.suggest import closest
from opspec.schema.settings import cache_root, caching_enabled

from . import report as R
from .bench import add_parser as add_bench_parser, cmd_bench
from .checks import checks_epilog
from .diff import add_parser as add_diff_parser, cmd_diff
from .progress import ProgressBar

EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2

_PROVE_EPILOG = """\
With no PATH, proves the bundled manifest. A PATH is a family file, a types.yaml or a
manifest folder (one with a spec/ subfolder, or holding the family files itself).

exit status: 0 no error diagnostic, 1 at least one, 2 usage error or unreadable input.
(`opspec diff` names its findings with ids of its own: `opspec diff --help`.)
"""


class UsageError(Exception):
    """A bad command line or an input that cannot be read: exit status 2."""


# -- the parser -----------------------------------------------------------------------------

def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("must be >= 0 (0 = one per CPU)")
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="opspec", description="Load, prove and explain PyTorch operator specs.")
    parser.add_argument("--version", action="version", version=f"opspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    load = sub.add_parser("load", help="load spec files strictly and list the specs found",
                          description="Load spec files or manifest folders (strict mode) and "
                                      "list every spec with the diagnostics found.")
    load.add_argument("paths", nargs="+", metavar="PATH", help="family file, types.yaml or folder")
    load.add_argument("--format", choices=("text", "json"), default="text")

    prove = sub.add_parser("prove", help="prove specs sound with Z3",
                           description="Prove every spec sound on every combination of "
                                       "discriminant values.",
                           epilog=_PROVE_EPILOG + "\n" + checks_epilog(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    prove.add_argument("paths", nargs="*", metavar="PATH",
                       help="family file, types.yaml or folder (default: the bundled manifest)")
    prove.add_argument("--op", action="append", dest="ops", metavar="NAME",
                       help="prove only this op (repeatable)")
    prove.add_argument("--format", choices=R.FORMATS, default="text")
    prove.add_argument("--jobs", "-j", type=_jobs, default=1, metavar="N",
                       help="worker processes (default 1; 0 = one per CPU)")
    prove.add_argument("--no-cache", action="store_true", help="neither read nor write the "
                       "proof cache (default: $OPSPEC_CACHE_DIR or ~/.cache/opspec/proofs)")
    prove.add_argument("--stats", action="store_true",
                       help="per-spec times: a table after text, a `stats` key in JSON, "
                            "the table on stderr for SARIF and JUnit")
    prove.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE")

    schema = sub.add_parser("schema", help="print the JSON Schema of a family file",
                            description="Print the JSON Schema (draft 2020-12) of a family "
                                        "file, or of types.yaml with --types.")
    schema.add_argument("--types", action="store_true", help="the schema of types.yaml")

    explain = sub.add_parser("explain", help="show one op's signature and proven plan",
                             description="Prove one op and print its signature in "
                                         "mathematical form, its type families and its plan.")
    explain.add_argument("op", metavar="OP")
    explain.add_argument("paths", nargs="*", metavar="PATH",
                         help="where to find OP (default: the bundled manifest)")
    explain.add_argument("--no-cache", action="store_true", help="do not use the proof cache")

    add_bench_parser(sub)
    add_diff_parser(sub)
    return parser


# -- helpers --------------------------------------------------------------------------------

def _check_paths(paths: Sequence[str]) -> None:
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise UsageError(f"no such file or folder: {given}")
        if not os.access(p, os.R_OK) or (p.is_dir() and not os.access(p, os.X_OK)):
            raise UsageError(f"cannot read {given}: permission denied")
        if p.is_dir() and not any(p.glob("*.yaml")) and not any(p.glob("spec/*.yaml")):
            raise UsageError(f"no .yaml files in {given} (nor in {given}/spec)")


def _load(paths: Sequence[str], *, use_cache: bool = False) -> Manifest:
    if not paths:
        from opspec.manifest import MANIFEST_DIR
        paths = [str(MANIFEST_DIR)]
    _check_paths(paths)
    cache = None
    if use_cache and caching_enabled():
        from opspec.schema.loader import ParseCache
        cache = ParseCache(cache_root() / "parse")
    try:
        return load_paths(list(paths), strict=True, parse_cache=cache)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def _emit(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text + "\n")
        return
    try:
        Path(output).write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from None


# -- commands -------------------------------------------------------------------------------

def cmd_load(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    manifest = _load(args.paths)
    rep = R.load_report(manifest, time.perf_counter() - start)
    _emit(R.render(rep, args.format), None)
    return R.exit_code(rep)


def _prove(manifest: Manifest, ops: Sequence[str] | None, *, jobs: int, use_cache: bool,
           progress=None, plans: bool = False):
    """Run the prover (imported here: `load` and `schema` do without z3)."""
    from opspec.solver.run import ProofCache, default_cache_dir, prove_manifest

    cache = ProofCache(default_cache_dir()) if use_cache and caching_enabled() else None
    return prove_manifest(manifest, ops=ops, jobs=jobs, cache=cache, progress=progress,
                          plans=plans)


def cmd_prove(args: argparse.Namespace) -> int:
    manifest = _load(args.paths, use_cache=not args.no_cache)
    bar = ProgressBar(sys.stderr)
    try:
        rep = _prove(manifest, args.ops, jobs=args.jobs or os.cpu_count() or 1,
                     use_cache=not args.no_cache, progress=bar if bar.enabled else None)
    finally:
        bar.close()
    _code_checks(rep, manifest)
    structured = args.format in ("sarif", "junit")
    _emit(R.render(rep, args.format, stats=args.stats and not structured), args.output)
    if args.stats and structured:
        sys.stderr.write(R.stats_table(rep) + "\n")
    return R.exit_code(rep)


def _code_checks(report, manifest: Manifest) -> None:
    """Check implemented bundled ops' code against their specs (this needs torch, so it is
    imported only when the manifest holds bundled specs); note skipped specs otherwise."""
    from opspec.manifest import MANIFEST_DIR

    root = Path(MANIFEST_DIR).resolve()
    if any(Path(s.file).resolve().is_relative_to(root) for s in manifest.specs.values()):
        try:
            from opspec.ops.codecheck import apply_code_checks
        except ImportError as exc:  # the prover alone runs without torch
            for r in report.specs:
                r.code_checks = f"skipped: the runtime cannot be imported ({exc})"
            return
        apply_code_checks(report, manifest)
        return
    for r in report.specs:
        r.code_checks = "skipped: no op class is bound to this manifest"


def cmd_schema(args: argparse.Namespace) -> int:
    from opspec.schema.jsonschema import spec_file_json_schema, types_file_json_schema

    schema = types_file_json_schema() if args.types else spec_file_json_schema()
    _emit(json.dumps(schema, indent=2), None)
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from opspec.schema.elaborate import elaborate, elaborate_adts

    from .explain import explain_lines

    manifest = _load(args.paths, use_cache=not args.no_cache)
    if args.op not in manifest.specs:
        close = closest(args.op, list(manifest.specs))
        raise UsageError(f"no spec named {args.op}" + (f"; did you mean {close}?" if close else ""))
    rep = _prove(manifest, [args.op], jobs=1, use_cache=not args.no_cache, plans=True)
    result = rep.specs[0] if rep.specs else None
    adts, _ = elaborate_adts(manifest.adts)
    spec, _ = elaborate(manifest.specs[args.op], adts)
    diag_text = R.diagnostics_text(R.all_diagnostics(rep))
    if result is not None:
        diag_text = R.spec_lines([result]) + diag_text
    _emit("\n".join(explain_lines(args.op, spec, result, diag_text)), None)
    return R.exit_code(rep)


COMMANDS = {"load": cmd_load, "prove": cmd_prove, "schema": cmd_schema, "explain": cmd_explain,
            "bench": cmd_bench, "diff": cmd_diff}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and --version exit 0; usage errors 2
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_usage(sys.stderr)
        sys.stderr.write("opspec: error: a command is required: "
                         + ", ".join(COMMANDS) + "\n")
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except UsageError as exc:
        sys.stderr.write(f"opspec {args.command}: error: {exc}\n")
        return EXIT_USAGE
