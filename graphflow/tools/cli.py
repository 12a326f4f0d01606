"""The ``graphflow`` command: look at, document, run and convert saved graphs.

    graphflow show GRAPH [-o graph.svg|png|pdf|dot]        DOT text or a picture
                    [--fused] [--collapse SCOPE] [--depth N]
    graphflow inspect GRAPH                                nodes, types, dtypes, shapes;
                                                           the regions a plan fuses
    graphflow run GRAPH [--fetch NAME[:i]] [--target OP] [--feed NAME[:i]=x.npy]
                    [--init] [--restore CKPT] [--save DIR] [--trace OUT.json]
                    (--init, --restore, then each --target one run, then the fetches)
    graphflow ops [NAME] [--markdown]                      the op reference
    graphflow convert IN OUT [--input NAME[:i]] [--output NAME[:i]] [--opset N] [--force]
                    between .json (graphflow's), .pb/.pbtxt (TensorFlow GraphDef) and
                    .onnx (output only), by extension
    graphflow cache [--clear]                              the compiled-kernel cache

GRAPH is any file ``convert`` reads: ``.pb``/``.pbtxt`` a TensorFlow GraphDef,
anything else graphflow's JSON. ``-v`` logs progress (long compiles) at INFO.
Exit status: 0 on success, 1 when the command fails (a bad graph file, an op
error, no Graphviz), 2 for bad usage (unknown verb or option, malformed --feed).
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from typing import Sequence

import numpy as np

from ..errors import FailedPreconditionError


class CommandError(Exception):
    """A failure to report in one line with exit status 1."""


class UsageError(Exception):
    """Bad usage to report in one line with exit status 2."""


log = logging.getLogger("graphflow.cli")


# -- show ----------------------------------------------------------------------------
def _cmd_show(args: argparse.Namespace) -> None:
    from . import visualize

    to_file = args.output not in (None, "-")
    if to_file:
        _check_output_file(args.output, "-o")
    if args.depth is not None and args.depth < 0:
        raise UsageError(f"--depth must be 0 or more, got {args.depth}")
    dot = visualize.to_dot(_load(args.graph), legend=not args.no_legend, fused=args.fused,
                           collapse=args.collapse, depth=args.depth)
    if not to_file:
        sys.stdout.write(dot)
        return
    ext = os.path.splitext(args.output)[1].lstrip(".").lower()
    if ext in ("dot", "gv"):
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(dot)
    elif ext in visualize.RENDER_FORMATS:
        visualize.render(dot, args.output, ext)
    else:
        raise UsageError(f"cannot tell the format of '{args.output}': use .dot, "
                         + ", ".join(f".{f}" for f in visualize.RENDER_FORMATS))
    print(f"wrote {args.output}", file=sys.stderr)


# -- inspect -------------------------------------------------------------------------
def _cmd_inspect(args: argparse.Namespace) -> None:
    graph = _load(args.graph)
    if args.after:
        from ..runtime import inspection
        if args.after == "list":
            print("\n".join(inspection.stage_names(graph)))
            return
        try:
            print(inspection.after(graph, args.after))
        except KeyError:
            raise UsageError(f"--after: no plan pass named '{args.after}'; there are "
                             f"{', '.join(inspection.stage_names(graph))}") from None
        return
    rows = [("NAME", "TYPE", "OUTPUTS", "INPUTS", "DEVICE")]
    for op in graph.operations():
        outs = ", ".join(f"{o.dtype.name} {o.shape}" for o in op.outputs) or "-"
        ins = [o.name for o in op.inputs] + [f"^{c.name}" for c in op.control_inputs]
        rows.append((op.name, op.type, outs, ", ".join(ins) or "-", op.device or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    print(f"{len(graph)} nodes")
    from graphflow.runtime.fusion import plan_regions

    regions = plan_regions(graph)
    if regions:
        print(f"fused regions of a plan fetching every output no node reads (Placeholders fed): "
              f"{len(regions)}")
        for region in regions:
            print(f"  {region.describe()}")


# -- run -------------------------------------------------------------------------------
def _parse_feed(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise UsageError(f"--feed expects NAME[:i]=FILE.npy, got '{text}'")
    return name, path


def _cmd_run(args: argparse.Namespace) -> None:
    from ..runtime import RunMetadata, RunOptions, Session, SessionConfig

    if not args.fetch and not args.target:
        raise UsageError("give at least one --fetch NAME[:i] or --target OP")
    fetches = [_output_name(f) for f in args.fetch]
    # where the results go is checked before any work is done
    if args.trace:
        _check_output_file(args.trace, "--trace")
    saves = _save_paths(args.save, fetches) if args.save else {}
    graph = _load(args.graph)
    feeds = _read_feeds(args.feed)
    init = _initializer(graph, args.graph) if args.init else None
    options = metadata = None
    if args.trace:
        options, metadata = RunOptions(trace=True), RunMetadata()
    config = SessionConfig(optimize=False) if args.no_optimize else None
    with Session(graph, config) as sess:
        if init is not None:
            sess.run(init)
        if args.restore:
            _restore(sess, args.restore)
        runs = [[target] for target in args.target] + ([fetches] if fetches else [])
        try:  # each --target one run, in order, then the fetches; the last run traced
            for k, run in enumerate(runs):
                last = k == len(runs) - 1
                values = sess.run(run, feeds, options=options if last else None,
                                  run_metadata=metadata if last else None)
                if k < len(args.target):
                    print(f"ran {run[0]}")
        except FailedPreconditionError as e:
            raise CommandError(f"{e} (graphflow run: --init runs the variables' "
                               f"initializers, --restore CKPT restores them)") from None
    _print_fetches(fetches, values, saves, args)
    if metadata is not None:
        if not metadata.events:
            log.warning("the trace %s is empty: no node ran, every fetched value was computed "
                        "when the plan was built (constant folding); feed a placeholder, or "
                        "pass --no-optimize to trace the graph as written", args.trace)
        metadata.save_chrome_trace(args.trace, warn_empty=False)  # warned above, with the CLI's hint
        print(f"wrote {args.trace}", file=sys.stderr)


def _read_feeds(texts: Sequence[str]) -> dict[str, np.ndarray]:
    feeds = {}
    for text in texts:
        name, path = _parse_feed(text)
        try:
            feeds[_output_name(name)] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise CommandError(f"cannot read --feed {name} from '{path}': {e}") from None
    return feeds


def _initializer(graph, path: str):
    """One op running every variable's initializer (``--init``): graphflow's, or TF 1.x's
    ``NAME/Assign`` in an imported GraphDef; a variable with neither is an error."""
    from ..variables import global_variables

    inits, missing = [], []
    for v in global_variables(graph):
        tf_assign = f"{v.name}/Assign"
        if v.initializer is not None:
            inits.append(v.initializer)
        elif tf_assign in graph and graph.operation(tf_assign).type == "AssignVariableOp":
            inits.append(graph.operation(tf_assign))
        else:
            missing.append(v.name)
    if missing:
        raise CommandError(f"--init: {', '.join(missing)} in '{path}' have no initializer; "
                           f"restore them (--restore CKPT) or run the graph's own init op "
                           f"(--target OP)")
    from ..scope import Scope
    return Scope(graph).with_control_dependencies(inits).no_op(name="graphflow_run_init")


def _restore(sess, path: str) -> None:
    """``--restore CKPT``: every variable of the graph, through gf.train.Saver."""
    from .train import Saver

    try:
        Saver().restore(sess, path)
    except (ValueError, LookupError) as e:
        raise CommandError(f"--restore {path}: {e}") from None


def _print_fetches(fetches: list[str], values: list, saves: dict[str, str],
                   args: argparse.Namespace) -> None:
    """Print each fetched value (and write it under ``--save``)."""
    from ..dtypes import as_dtype

    if args.save:
        os.makedirs(args.save, exist_ok=True)
    for name, value in zip(fetches, values):
        print(f"{name}  {as_dtype(value.dtype).name} {list(value.shape)}")
        print(np.array2string(value, threshold=args.threshold))
        path = saves.pop(name, None)  # a fetch named twice is written once
        if path is not None:
            try:
                with open(path, "xb") as f:  # never overwrite, even a file made meanwhile
                    np.save(f, value, allow_pickle=value.dtype == object)
            except FileExistsError:
                raise CommandError(f"--save: '{path}' exists; not overwriting it") from None
            print(f"wrote {path}", file=sys.stderr)


def _output_name(name: str) -> str:
    """``op`` -> ``op:0``; ``op:1`` stays."""
    return name if ":" in name else f"{name}:0"


def save_file_name(output_name: str) -> str:
    """The file ``--save`` writes an output to: ``total:0`` -> ``total_0.npy``,
    ``layer/out:1`` -> ``layer%2Fout_1.npy``. One name per output (``a/b:0`` and
    ``a_b:0`` differ): the op name is percent-encoded, and '%' is in no op name."""
    from urllib.parse import quote

    op, _, index = output_name.rpartition(":")
    return f"{quote(op, safe='')}_{index}.npy"


def _save_paths(directory: str, fetches: Sequence[str]) -> dict[str, str]:
    """{fetch: path} for ``--save DIR``; an existing file or a DIR that is not a
    directory is an error now, before the graph runs."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise CommandError(f"--save: '{directory}' exists and is not a directory")
    paths = {name: os.path.join(directory, save_file_name(name)) for name in fetches}
    for path in paths.values():
        if os.path.lexists(path):
            raise CommandError(f"--save: '{path}' exists; not overwriting it (remove it or "
                               f"choose another directory)")
    return paths


def _element_count(text: str) -> int:
    """``--threshold``'s value: an element count numpy's printing takes (0 to 2**63 - 1)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= value <= sys.maxsize:
        raise argparse.ArgumentTypeError(f"{value} is not an element count (0 to {sys.maxsize})")
    return value


def _check_output_file(path: str, option: str) -> None:
    """A file ``option`` may write: not a directory, in a directory that exists."""
    if os.path.isdir(path):
        raise CommandError(f"{option}: '{path}' is a directory; give a file name")
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        raise CommandError(f"{option}: cannot write '{path}': no directory '{parent}'")


# -- convert ---------------------------------------------------------------------------
#: file extensions convert reads and writes, by format
_READS = {".json": "json", ".pb": "tf", ".pbtxt": "tf"}
_WRITES = {".json": "json", ".pb": "tf", ".pbtxt": "tf", ".onnx": "onnx"}


def _format(path: str, table: dict, role: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext in table:
        return table[ext]
    if role == "IN" and ext == ".onnx":
        raise UsageError(f"cannot read '{path}': ONNX is an output format only (convert "
                         f"reads .json, .pb and .pbtxt)")
    raise UsageError(f"cannot tell the format of {role} '{path}' from its extension: use "
                     + ", ".join(table))


def _cmd_convert(args: argparse.Namespace) -> None:
    from ..interop.onnx_export import export_onnx
    from ..interop.tf_export import export_tf_graph

    if not os.path.isdir(args.src):  # a directory: the reader says what it holds
        _format(args.src, _READS, "IN")
    dst = _format(args.dst, _WRITES, "OUT")
    if dst != "onnx" and (args.input or args.output or args.opset is not None):
        raise UsageError("--input, --output and --opset apply to an .onnx OUT only (other "
                         "formats hold the whole graph)")
    if os.path.lexists(args.dst) and not args.force:
        raise CommandError(f"'{args.dst}' exists; not overwriting it (use --force)")
    _check_output_file(args.dst, "OUT")
    graph = _load(args.src)
    try:
        if dst == "json":
            graph.save(args.dst)
        elif dst == "tf":
            export_tf_graph(graph, args.dst)
        else:
            export_onnx(graph, [_output_name(n) for n in args.input] or None,
                        [_output_name(n) for n in args.output] or None, args.dst,
                        opset=18 if args.opset is None else args.opset)
    except ImportError as e:  # an optional extra that is not installed
        raise CommandError(str(e)) from None
    print(f"wrote {args.dst} ({len(graph)} nodes of {args.src})", file=sys.stderr)


# -- ops -------------------------------------------------------------------------------
def _cmd_ops(args: argparse.Namespace) -> None:
    from .. import registry

    if args.name:
        try:
            defs = [registry.op_def(args.name)]
        except LookupError:
            raise CommandError(f"no op named '{args.name}'; `graphflow ops` lists them") from None
    else:
        defs = registry.registered_ops()
    sys.stdout.write(op_reference_markdown(defs) if args.markdown else op_reference_text(defs))


def _family(d) -> str:
    fn = d.shape_function or (d.kernels[0].fn if d.kernels else None)
    module = getattr(fn, "__module__", "") or ""
    return module.rsplit(".", 1)[-1] if module.startswith("graphflow.ops.") else "other"


def _type_set(types: Sequence) -> str:
    """A kernel's attr constraint, named when it is one of the usual dtype sets."""
    from .. import dtypes

    named = {frozenset(dtypes.ALL_TYPES): "any type",
             frozenset(t for t in dtypes.ALL_TYPES if not t.is_string): "any type but string",
             frozenset(dtypes.NUMBER_TYPES): "number types",
             frozenset(dtypes.REAL_NUMBER_TYPES): "real number types"}
    return named.get(frozenset(types)) or "{" + ", ".join(repr(t) if isinstance(t, str) else str(t) for t in types) + "}"


def _kernels(d) -> str:
    """``cpu; gpu (T: any type but string)``: device types first CPU, then the rest."""
    parts = []
    for k in sorted(d.kernels, key=lambda k: (k.device_type != "cpu", k.device_type)):
        where = "; ".join(f"{a}: {_type_set(v)}" for a, v in k.constraints.items())
        parts.append(f"{k.device_type} ({where})" if where else k.device_type)
    return ", ".join(parts) or "none"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def op_reference_text(defs: Sequence) -> str:
    """One block per op: signature, doc, shape rule, kernel devices."""
    blocks = []
    for d in defs:
        lines = [d.signature]
        if d.doc:
            lines.append(f"    {_one_line(d.doc)}")
        if d.shape_rule:
            lines.append(f"    shape:   {_one_line(d.shape_rule)}")
        lines.append(f"    builder: scope.{d.builder_name}()"
                     + (f"  (aliases: {', '.join(d.aliases)})" if d.aliases else ""))
        lines.append(f"    kernels: {_kernels(d)}")
        lines.append(f"    gradient: {d.gradient_description}")
        lines.append(f"    export:   {_exports(d)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def op_reference_markdown(defs: Sequence) -> str:
    """docs/ops.md: ops grouped by family module, each with its signature and rules."""
    families: dict[str, list] = {}
    for d in defs:
        families.setdefault(_family(d), []).append(d)
    out = ["# graphflow op reference", "",
           "Generated from the op registry by `graphflow ops --markdown`; do not edit by hand.",
           f"{len(defs)} op{'s' if len(defs) != 1 else ''}. Attrs are `name: kind = default`; kernels list the device types "
           "with a kernel and the dtypes they take.", ""]
    for family, members in families.items():
        out.append(f"- **{family}**: " + ", ".join(f"[{d.name}](#{d.name.lower()})"
                                                    for d in members))
    for family, members in families.items():
        out += ["", f"## {family}"]
        for d in members:
            out += ["", f"### {d.name}", "", "```", d.signature, "```", ""]
            if d.doc:
                out += [_one_line(d.doc), ""]
            if d.shape_rule:
                out.append(f"- **Shape:** {_one_line(d.shape_rule)}")
            aliases = "".join(f", `scope.{a}()`" for a in d.aliases)
            out.append(f"- **Builder:** `scope.{d.builder_name}()`{aliases}, "
                       f"`graphflow.ops.{d.name}.create(scope, ...)`")
            out.append(f"- **Kernels:** {_kernels(d)}")
            out.append(f"- **Gradient:** {d.gradient_description}")
            out.append(f"- **Export:** {_exports(d)}")
    return "\n".join(out) + "\n"


def _exports(d) -> str:
    """How ``gf.export_tf_graph`` and ``gf.export_onnx`` write the op (the OpDef's
    ``tf`` form and its registered exporters)."""
    if d.tf is not None:
        tf = f"TensorFlow `{d.tf.describe()}`"
    elif "tf" in d.exporters:
        tf = "TensorFlow (lowered to TF ops)"
    else:
        tf = "no TensorFlow form"
    return f"{tf}; " + ("ONNX" if "onnx" in d.exporters else "no ONNX lowering")


# -- cache ---------------------------------------------------------------------------
def _cmd_cache(args: argparse.Namespace) -> None:
    """Where the compiled-kernel cache is and how big (ops/jit.py); ``--clear`` empties it."""
    from ..ops import jit

    folder = jit.cache_dir()
    versions = sorted(folder.parent.glob("numba-*")) if folder.parent.is_dir() else []
    if args.clear:
        count, size = _files_and_bytes(versions)
        for path in versions:  # only numba's folders: GRAPHFLOW_CACHE_DIR may hold more
            shutil.rmtree(path)
        print(f"cleared the kernel cache {folder.parent}: {count} files, {_megabytes(size)}")
        return
    count, size = _files_and_bytes([folder])
    state = "on" if jit.cache_enabled() else "off"
    print(f"kernel cache: {folder}")
    print(f"  {state}; {count} files, {_megabytes(size)} (GRAPHFLOW_CACHE_DIR moves it, "
          f"GRAPHFLOW_JIT_CACHE=0 turns it off)")
    for old in (v for v in versions if v != folder):
        print(f"  another numba version's: {old} ({_megabytes(_files_and_bytes([old])[1])})")


def _files_and_bytes(folders: Sequence) -> tuple[int, int]:
    files = [p for folder in folders for p in folder.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


# -- plumbing --------------------------------------------------------------------------
def _load(path: str):
    """The graph in ``path``, read as ``convert`` reads it: ``.pb``/``.pbtxt`` (and a
    directory, to say what it holds) as a TensorFlow GraphDef, anything else as
    graphflow's JSON. Its nodes are "defined at" the file in error messages."""
    from ..serialization import load_graph

    try:
        if _is_saved_model(path):  # its signature's graph; the values stay in variables/
            from ..interop.saved_model import load_saved_model
            model = load_saved_model(path)
            print(f"read the SavedModel {path}: signature serving_default, "
                  f"{len(model.variables)} variable(s) whose values gf.load_saved_model "
                  f"restores from {os.path.join(path, 'variables')}", file=sys.stderr)
            return model.graph
        if os.path.isdir(path) or _READS.get(os.path.splitext(path)[1].lower()) == "tf":
            from ..interop.tf_import import import_tf_graph
            if not os.path.exists(path):
                raise CommandError(f"cannot read '{path}': No such file or directory")
            return import_tf_graph(path)
        return load_graph(path)
    except ImportError as e:  # the protobuf classes of an optional extra
        raise CommandError(str(e)) from None
    except OSError as e:
        raise CommandError(f"cannot read '{path}': {e.strerror or e}") from None


def _is_saved_model(path: str) -> bool:
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt"))


#: What a GRAPH argument may be (the formats ``convert`` reads).
_GRAPH_HELP = ("a graph file: .pb/.pbtxt (a TensorFlow GraphDef), a SavedModel directory or "
               "graphflow's .json")


def build_parser() -> argparse.ArgumentParser:
    """The command line: one sub-parser per verb."""
    from ..version import __version__

    parser = argparse.ArgumentParser(
        prog="graphflow", description="Look at, document, run and convert saved graphflow "
        "graphs (graph.save's JSON, TensorFlow GraphDefs).",
        epilog="Exit status: 0 success, 1 failure, 2 bad usage.")
    parser.add_argument("--version", action="version", version=f"graphflow {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log progress at INFO (long kernel compiles, placement)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for add_verb in (_add_show, _add_inspect, _add_run, _add_ops, _add_convert, _add_cache):
        add_verb(verbs)
    return parser


def _add_show(verbs) -> None:
    """``graphflow show``: draw a graph."""
    show = verbs.add_parser("show", help="draw a graph (DOT text, or SVG/PNG/PDF via Graphviz)",
                            description="Print the graph as Graphviz DOT text, or write it to "
                            "-o FILE: .dot writes the text, .svg/.png/.pdf render it with "
                            "Graphviz's `dot` (apt-get install graphviz).")
    show.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    show.add_argument("-o", "--output", metavar="FILE", help="out.svg, out.png, out.pdf or out.dot")
    show.add_argument("--no-legend", action="store_true", help="leave out the colour legend")
    show.add_argument("--fused", action="store_true",
                      help="draw the element-wise regions a plan fuses as clusters")
    show.add_argument("--collapse", action="append", default=[], metavar="SCOPE",
                      help="draw name scope SCOPE (and what it holds) as one box (repeatable)")
    show.add_argument("--depth", type=int, metavar="N",
                      help="open N levels of name scopes; deeper scopes are one box each "
                      "(0: every top-level scope is a box)")
    show.set_defaults(func=_cmd_show, parser=show)


def _add_inspect(verbs) -> None:
    """``graphflow inspect``: list a graph's nodes and fused regions."""
    inspect = verbs.add_parser("inspect", help="list a graph's nodes, types, dtypes and shapes, "
                               "and the element-wise regions a plan fuses")
    inspect.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    inspect.add_argument("--after", metavar="PASS",
                         help="print the plan IR a CPU Session compiles (every output no node "
                              "reads fetched, Placeholders fed) after the plan pass PASS (a part "
                              "of its name will do: fuse, fold), 'initial', or 'segments' (the "
                              "compiled segments of the built plan); 'list' names them")
    inspect.set_defaults(func=_cmd_inspect, parser=inspect)


def _add_run(verbs) -> None:
    """``graphflow run``: run a graph, print (and save) what it fetches."""
    run = verbs.add_parser("run", help="run a graph and print the fetched values",
                           description="Run a saved graph on the available devices and print "
                           "each fetched value.")
    run.add_argument("graph", metavar="GRAPH", help=_GRAPH_HELP)
    run.add_argument("--fetch", action="append", default=[], metavar="NAME[:i]",
                     help="an output to fetch (repeatable; NAME means NAME:0)")
    run.add_argument("--target", action="append", default=[], metavar="OP",
                     help="an op to run, e.g. a training step: one run each, in the order "
                     "given, before the fetches (repeatable)")
    run.add_argument("--init", action="store_true",
                     help="run the variables' initializers first")
    run.add_argument("--restore", metavar="CKPT",
                     help="restore the variables from checkpoint CKPT first (gf.train.Saver)")
    run.add_argument("--no-optimize", action="store_true",
                     help="run the graph as written (SessionConfig(optimize=False))")
    run.add_argument("--feed", action="append", default=[], metavar="NAME[:i]=FILE.npy",
                     help="feed an output (usually a Placeholder) from a .npy file (repeatable)")
    run.add_argument("--save", metavar="DIR",
                     help="also write each fetched value to DIR as .npy (NAME:i as NAME_i.npy, "
                     "'/' in NAME as %%2F); an existing file is not overwritten")
    run.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace of the run")
    run.add_argument("--threshold", type=_element_count, default=1000, metavar="N",
                     help="summarise arrays with more than N elements (default 1000)")
    run.set_defaults(func=_cmd_run, parser=run)


def _add_ops(verbs) -> None:
    """``graphflow ops``: the op reference."""
    ops = verbs.add_parser("ops", help="the op reference: signatures, shape rules, kernels",
                           description="List every registered op (or one op) with its "
                           "signature, shape rule and the devices that have kernels.")
    ops.add_argument("name", nargs="?", metavar="NAME", help="one op (type or builder name)")
    ops.add_argument("--markdown", action="store_true", help="Markdown, as in docs/ops.md")
    ops.set_defaults(func=_cmd_ops, parser=ops)


def _add_convert(verbs) -> None:
    """``graphflow convert``: between graphflow, TensorFlow and ONNX files."""
    convert = verbs.add_parser(
        "convert", help="convert a graph between .json, .pb/.pbtxt and .onnx",
        description="Convert a graph file by extension: .json (graphflow's own, graph.save), "
        ".pb or .pbtxt (a TensorFlow GraphDef, binary or text; read with "
        "gf.import_tf_graph, written with gf.export_tf_graph) and .onnx (written only, "
        "with gf.export_onnx; needs the onnx extra).")
    convert.add_argument("src", metavar="IN", help="a .json, .pb or .pbtxt file")
    convert.add_argument("dst", metavar="OUT", help="a .json, .pb, .pbtxt or .onnx file")
    convert.add_argument("--input", action="append", default=[], metavar="NAME[:i]",
                         help="ONNX: a tensor the model takes as input (repeatable; default: "
                         "every placeholder the outputs need)")
    convert.add_argument("--output", action="append", default=[], metavar="NAME[:i]",
                         help="ONNX: a tensor the model computes (repeatable; default: every "
                         "tensor no node consumes, but placeholders, constants and stateful "
                         "ops)")
    convert.add_argument("--opset", type=int, metavar="N", help="ONNX opset (default 18)")
    convert.add_argument("-f", "--force", action="store_true", help="overwrite OUT")
    convert.set_defaults(func=_cmd_convert, parser=convert)


def _add_cache(verbs) -> None:
    """``graphflow cache``: the compiled-kernel cache."""
    cache = verbs.add_parser("cache", help="where the compiled-kernel cache is, how big; --clear",
                             description="Show the folder numba's compiled kernels are cached "
                             "in (GRAPHFLOW_CACHE_DIR, else $XDG_CACHE_HOME/graphflow or "
                             "~/.cache/graphflow) and its size, or empty it.")
    cache.add_argument("--clear", action="store_true", help="remove every cached kernel")
    cache.set_defaults(func=_cmd_cache, parser=cache)


class _StderrFormatter(logging.Formatter):
    def __init__(self, verb: str):
        super().__init__()
        self.verb = verb

    def format(self, record: logging.LogRecord) -> str:
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        return f"graphflow {self.verb}: {level}{record.getMessage()}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv``; returns the exit status."""
    from ..errors import OpError

    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad usage, 0 for --help/--version
    logger = logging.getLogger("graphflow")
    handler, level = logging.StreamHandler(sys.stderr), logger.level
    handler.setFormatter(_StderrFormatter(args.verb))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if args.verbose else logging.WARNING)
    try:
        args.func(args)
    except UsageError as e:
        args.parser.error(str(e))  # the verb's usage line, then exit 2
    except BrokenPipeError:  # `graphflow ops | head`: stop quietly (before OSError, its base)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (CommandError, OpError, OSError) as e:  # OSError: e.g. a full disk, no permission
        print(f"graphflow {args.verb}: error: {e}", file=sys.stderr)
        return 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
