"""Regenerate `benchmarks/RESULTS.md` from the JSON of an `opspec bench` run.

    python benchmarks/make_results.py JSON [--plot PNG] [--redraw] [--prove PROVE_JSON]
                                           [--output MD]

The Markdown has a header (GPU, torch and Triton versions, date, the measured ceilings), a
summary table (geometric-mean speedup over each baseline per op and overall), a table per op
with every case and its worst row. `--plot PNG` links the plot: an existing PNG (the one the
device run wrote with `opspec bench --plot`) is linked as it is; a missing one, or any with
`--redraw`, is drawn from the JSON first, which needs matplotlib. `--prove` adds the prover
benchmark's section from the file `benchmarks/prove_stats.py` writes.

Exit status: 0 written, 2 unreadable input or the plot cannot be drawn.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from opspec.ops import bench_report as R

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS.md"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", metavar="JSON", help="the result file of `opspec bench --json`")
    ap.add_argument("--plot", metavar="PNG", help="link this plot (drawn if missing)")
    ap.add_argument("--redraw", action="store_true", help="draw the plot even if PNG exists")
    ap.add_argument("--prove", metavar="PROVE_JSON",
                    help="add the prover benchmark (benchmarks/prove_stats.py's output)")
    ap.add_argument("--output", "-o", metavar="MD", default=str(DEFAULT_OUTPUT),
                    help=f"where to write (default: {DEFAULT_OUTPUT.name} beside this script)")
    args = ap.parse_args(argv)
    try:
        result = R.load_json(args.json)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"make_results: cannot read {args.json}: {exc}\n")
        return 2
    prove = None
    if args.prove:
        try:
            prove = json.loads(Path(args.prove).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"make_results: cannot read {args.prove}: {exc}\n")
            return 2
    link = None
    if args.plot:
        png = Path(args.plot)
        if args.redraw or not png.exists():
            try:
                R.plot_png(result, png)
            except R.MissingMatplotlib as exc:
                sys.stderr.write(f"make_results: {exc}\n")
                return 2
        link = R.relpath_for_link(png, args.output)
    text = R.results_markdown(result, plot=link, source=Path(args.json).name, prove=prove,
                              prove_source=Path(args.prove).name if args.prove else None)
    Path(args.output).write_text(text, encoding="utf-8")
    sys.stdout.write(f"wrote {args.output}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
