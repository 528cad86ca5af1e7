"""The `advisor` command line. Each command parses, calls one library function, renders."""

from __future__ import annotations

import typer

from advisor.cli import catalog_cmd, dataset_cmd
from advisor.cli.collect_cmd import collect
from advisor.cli.learn_cmd import evaluate, train
from advisor.cli.predict_cmd import explain, predict
from advisor.cli.recommend_cmd import compare, recommend
from advisor.cli.space_cmd import memory, space

app = typer.Typer(
    help="advisor: how to run distributed LLM training on your GPUs. It knows platforms "
    "(memory, FLOP/s, NVLink and network) and models (layers, heads, experts), enumerates "
    "parallel layouts — TP tensor, PP pipeline, DP data, CP context, EP expert parallelism, "
    "VP virtual pipeline stages, micro-batch, activation recompute, optimizer/FSDP sharding — "
    "and predicts per-GPU memory, step time, throughput, power, expected losses and thermal "
    "risk for each.",
    no_args_is_help=True, rich_markup_mode=None, pretty_exceptions_enable=False)
app.add_typer(catalog_cmd.app, name="catalog")
app.add_typer(dataset_cmd.app, name="dataset")
app.command()(recommend)
app.command()(compare)
app.command()(space)
app.command()(memory)
app.command()(predict)
app.command()(explain)
app.command()(collect)
app.command()(train)
app.command()(evaluate)


def _tolerate_narrow_encodings(*streams) -> None:
    """Under an ASCII or Latin-1 locale (`LC_ALL=C`, `PYTHONIOENCODING=ascii`) print what the
    encoding cannot hold (×, °C, –) as `?` rather than fail with UnicodeEncodeError."""
    for stream in streams:
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf16", "utf32") and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def main() -> None:
    """Run the CLI; a usage error (unknown option, bad value) is one `error:` line and exit 2,
    like every other error (`common.guard`)."""
    import sys

    _tolerate_narrow_encodings(sys.stdout, sys.stderr)
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        print("error: aborted.", file=sys.stderr)
        sys.exit(130)
    except Exception as e:
        # Click's exceptions, whichever Click Typer bundles: they carry exit_code and a
        # one-line format_message(); anything else is a bug and keeps its traceback.
        if not (hasattr(e, "exit_code") and hasattr(e, "format_message")):
            raise
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError":
            try:
                print(ctx.get_help() if ctx else e.format_message())
            except BrokenPipeError:  # `advisor | head`: the reader left
                pass
            sys.exit(0)
        if e.exit_code == 2:
            where = ctx.command_path if ctx else "advisor"
            print(f"error: {e.format_message()} (see {where} --help)", file=sys.stderr)
        else:
            print(f"error: {e.format_message()}", file=sys.stderr)
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
