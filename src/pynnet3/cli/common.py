"""Kaldi-style command lines on top of click.

Kaldi binaries accept ``--opt=value``; pynnet3 also accepts ``--opt value``,
``--opt`` alone for a boolean (meaning true), ``--config=file`` (lines of
``--opt=value``, overridden by the command line), ``--help``, ``--verbose=N``
and underscores in option names (``--frames_per_chunk``), which Kaldi
normalises to hyphens.  Each binary echoes its command line to stderr and
reports errors as one ``ERROR (...)`` line with exit status 1, never a
traceback.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import signal
import sys
from typing import Any, Callable, Iterable, Mapping, Sequence

import click

from .. import log
from ..errors import PynnetError, UsageError
from . import freeze_after_command, resume_startup_gc


class KaldiBool(click.ParamType):
    """Kaldi's bool option values: true/false (also t/f, 1/0, any case)."""

    name = "bool"

    def convert(self, value: Any, param: Any, ctx: Any) -> bool:
        if isinstance(value, bool):
            return value
        v = str(value).strip().lower()
        if v in ("true", "t", "1", "yes"):
            return True
        if v in ("false", "f", "0", "no"):
            return False
        self.fail(f"invalid boolean value '{value}' (expected true or false)", param, ctx)


BOOL = KaldiBool()
_BOOL_WORDS = {"true", "false", "t", "f", "True", "False", "TRUE", "FALSE"}


def bool_option(name: str, default: bool, help: str) -> Callable:
    """A Kaldi bool option: ``--name``, ``--name=true|false``, ``--name false``."""
    return click.option(name, type=BOOL, default=default, show_default=True, help=help)


# ---------------------------------------------------------------------------
# Options dataclasses as click options (Kaldi's ``opts.Register(&po)``)
#
# A library options dataclass says which of its fields are command-line
# options through the field's metadata:
#
#     minibatch_size: str = field(default="256", metadata={
#         "flag": "minibatch-size", "help": "String controlling the minibatch size..."})
#
# A field without a "flag" is not an option (set in code only).  Optional
# metadata: "choices" (the accepted values).  The click type follows the
# annotation (bool -> Kaldi's true/false, int, float, str).


def option_fields(spec: Any, names: Iterable[str] | None = None) -> list[dataclasses.Field]:
    """The fields of the dataclass (or instance) ``spec`` that are options:
    those named in ``names`` in that order, else every field with a flag."""
    by_name = {f.name: f for f in dataclasses.fields(spec)}
    if names is None:
        return [f for f in by_name.values() if f.metadata.get("flag")]
    out = []
    for name in names:
        f = by_name.get(name)
        if f is None or not f.metadata.get("flag"):
            raise KeyError(f"{getattr(spec, '__name__', type(spec).__name__)}.{name} "
                           "is not an option field")
        out.append(f)
    return out


def has_option_metadata(spec: Any) -> bool:
    """Whether the dataclass ``spec`` declares its flags in field metadata."""
    return any(f.metadata.get("flag") for f in dataclasses.fields(spec))


def _param_name(prefix: str, field_name: str) -> str:
    return f"{prefix.replace('.', '_')}_{field_name}" if prefix else field_name


def _field_default(spec: Any, f: dataclasses.Field) -> Any:
    if not isinstance(spec, type):
        return getattr(spec, f.name)
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "str | None": str}


def _click_type(f: dataclasses.Field) -> Any:
    choices = f.metadata.get("choices")
    if choices:
        return click.Choice(list(choices))
    annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if annotation in ("bool", "bool | None"):
        return BOOL
    if annotation not in _TYPES:
        raise TypeError(f"option field {f.name}: no click type for {annotation!r}")
    return _TYPES[annotation]


def register_options(spec: Any, prefix: str = "", names: Iterable[str] | None = None,
                     help: Mapping[str, str] | None = None) -> Callable[[Callable], Callable]:
    """Decorator adding the option fields of an options dataclass to a click
    command, as Kaldi's ``opts.Register(&po)`` (``ParseOptions`` with a
    prefix for a nested struct: ``--compiler.use-shortcut``).

    ``spec``: the dataclass, or an instance of it whose values are the
    defaults (Kaldi sets a binary's own defaults before Register).
    ``prefix``: the flag prefix ("compiler" for ``--compiler.<flag>``); the
    values arrive as keyword arguments ``<prefix>_<field>`` (``<field>``
    without one), which :func:`options_from` turns back into the dataclass.
    ``names``: the fields to register, in the order ``--help`` lists them
    (default: every field with a flag, in field order).
    ``help``: per-field help that replaces the dataclass's for this binary.
    """
    chosen = option_fields(spec, names)
    help = dict(help or {})

    def deco(command: Callable) -> Callable:
        # click applies decorators bottom-up: add in reverse to list in order.
        for f in reversed(chosen):
            flag = f.metadata["flag"]
            default = _field_default(spec, f)
            command = click.option(
                f"--{prefix}.{flag}" if prefix else f"--{flag}", _param_name(prefix, f.name),
                type=_click_type(f), default=default,
                show_default=f.metadata.get("show_default", default not in (None, "")),
                help=help.get(f.name, f.metadata.get("help", "")))(command)
        return command

    return deco


def options_from(spec: Any, kwargs: dict[str, Any], prefix: str = "",
                 names: Iterable[str] | None = None, **overrides: Any) -> Any:
    """The dataclass of ``spec`` built from the values :func:`register_options`
    produced (removed from ``kwargs``); ``spec``'s own values (an instance) or
    defaults (a class) for the rest, ``overrides`` last."""
    values = {}
    for f in option_fields(spec, names):
        key = _param_name(prefix, f.name)
        if key in kwargs:
            values[f.name] = kwargs.pop(key)
    values.update(overrides)
    if isinstance(spec, type):
        return spec(**values)
    return dataclasses.replace(spec, **values)


def _read_config_file(path: str, seen: set[str]) -> list[str]:
    if path in seen:
        raise UsageError(f"--config file {path} includes itself")
    seen = seen | {path}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"cannot read --config file {path}: {e.strerror}") from None
    from ..nnet.config_line import read_config_lines

    args: list[str] = []
    # Kaldi reads option files as bytes: anything goes in a comment.
    for num, line in read_config_lines(data, path):
        if not line.startswith("--"):
            raise UsageError(f"{path}:{num}: expected --option=value, got '{line}'")
        if line.startswith("--config="):
            args += _read_config_file(line.split("=", 1)[1], seen)
        else:
            args.append(line)
    return args


def normalize_argv(argv: Sequence[str], command: click.Command) -> list[str]:
    """Turn Kaldi-style arguments into the form click parses unambiguously."""
    bool_opts = {opt for p in command.params if isinstance(p, click.Option)
                 and isinstance(p.type, KaldiBool) for opt in p.opts}
    config_args: list[str] = []
    out: list[str] = []
    i = 0
    positional_only = False
    argv = list(argv)
    while i < len(argv):
        a = argv[i]
        i += 1
        if positional_only or not a.startswith("--") or a == "--":
            if a == "--":
                positional_only = True
            out.append(a)
            continue
        name, eq, value = a.partition("=")
        name = "--" + name[2:].replace("_", "-")
        if name == "--config":
            if not eq:
                if i >= len(argv):
                    raise UsageError("--config needs a file name")
                value = argv[i]
                i += 1
            config_args += normalize_argv(_read_config_file(value, set()), command)
            continue
        if not eq and name in bool_opts:
            if i < len(argv) and argv[i] in _BOOL_WORDS:
                value = argv[i]
                i += 1
            else:
                value = "true"
            eq = "="
        out.append(name + eq + value if eq else name)
    # Options from --config come first so that the command line overrides them.
    return config_args + out


class ArgumentCountError(click.UsageError):
    """The wrong number of positional arguments (Kaldi prints its usage)."""


class _OutputClosed(BaseException):
    """The reader of an output pipe went away (EPIPE) inside a command.

    Raised in place of BrokenPipeError so that click, which turns an EPIPE
    into ``sys.exit(1)``, lets it through to :func:`run`.  Not an Exception:
    nothing between the command and :func:`run` should handle it."""


class _Interrupted(BaseException):
    """SIGINT (KeyboardInterrupt) inside a command; click would make it an
    ``Abort`` and print a blank line."""


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that no later flush of buffered output can
    fail again (Python's final flush would print "Exception ignored ...")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno() if sys.stdout is not None else 1)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def die_by_signal(signum: int) -> int:
    """End the process by ``signum`` with the signal's default action, as a
    Unix tool (and Kaldi, which does not catch SIGINT or SIGPIPE) ends: the
    shell sees WIFSIGNALED, ``$?`` = 128 + signum (130 for SIGINT, 141 for
    SIGPIPE), and ``set -e`` scripts and job control (Ctrl-C in a loop) behave
    as with any other program.  Returns 128 + signum only if the signal could
    not end the process."""
    try:
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    if signum == signal.SIGPIPE:
        _silence_stdout()
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    signal.raise_signal(signum)
    return 128 + signum


def run(command: click.Command, prog: str, argv: Sequence[str] | None = None) -> int:
    """Run a binary: echo the command line, parse, map errors to exit codes.

    Exit statuses (docs/exit-statuses.md): 0 success; 1 an error (one
    ``ERROR`` line) or Kaldi's "nothing done" status (the command raises
    ``click.exceptions.Exit(1)``); 2 an internal error (a bug in pynnet3);
    death by SIGINT or SIGPIPE as Unix tools die (the shell sees 130 / 141).
    """
    status = _run(command, prog, argv)
    freeze_after_command()
    # Flush what is left buffered on stdout now, while an EPIPE can still be
    # handled (at interpreter exit it would print "Exception ignored ...").
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        return die_by_signal(signal.SIGPIPE)
    except KeyboardInterrupt:
        return die_by_signal(signal.SIGINT)
    return status


def _run(command: click.Command, prog: str, argv: Sequence[str] | None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    resume_startup_gc()
    log.set_program_name(prog)
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()  # type: ignore[assignment]
    sys.stderr.write(" ".join([prog] + [shlex.quote(a) for a in argv]) + "\n")
    try:
        from ..threads import default_blas_threads

        default_blas_threads()
        args = normalize_argv(argv, command)
        # With standalone_mode=False click returns (not raises) the status of
        # an Exit(n) raised inside the command: that status is the binary's.
        status = command.main(args, prog_name=prog, standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code or 0)
    except (_Interrupted, KeyboardInterrupt):
        return die_by_signal(signal.SIGINT)
    except click.exceptions.Abort as e:
        if isinstance(e.__cause__, KeyboardInterrupt):  # SIGINT while click parsed
            return die_by_signal(signal.SIGINT)
        log.error("aborted")
        return 1
    except (_OutputClosed, BrokenPipeError):
        return die_by_signal(signal.SIGPIPE)
    except click.UsageError as e:
        # The cause first, on one line (with click's "did you mean" for a
        # misspelt option); the usage text only where the arguments were wrong.
        log.error(e.format_message())
        if isinstance(e, ArgumentCountError):
            sys.stderr.write("\n" + kaldi_usage_text(command.help or "") + "\n\n")
        sys.stderr.write(f"Run '{prog} --help' for the options.\n")
        return 1
    except click.ClickException as e:
        log.error(e.format_message())
        return 1
    except PynnetError as e:
        log.error(str(e))
        return 1
    except Exception as e:  # a bug in pynnet3, not a user error
        if log.verbose_level() >= 1:
            import traceback

            traceback.print_exc()
        log.error(f"internal error ({type(e).__name__}: {e}); this is a bug in pynnet3, "
                  "please report it (rerun with --verbose=1 for a traceback)")
        return 2
    return status if isinstance(status, int) else 0


def common_options(f: Callable) -> Callable:
    """Options every Kaldi binary has (``--config`` is handled before click)."""
    f = click.option("--verbose", type=int, default=0, show_default=True,
                     help="Verbose level (higher -> more logging).",
                     callback=lambda ctx, p, v: (log.set_verbose(v), v)[1], expose_value=False)(f)
    f = click.option("--config", type=str, default=None, expose_value=False,
                     help="Configuration file to read (lines of --option=value).")(f)
    return f


def kaldi_usage_text(usage: str) -> str:
    """Kaldi's usage text as written in the binary's USAGE (without click's
    ``\\b`` no-rewrap markers), printed verbatim as Kaldi prints it."""
    lines = [line for line in usage.strip("\n").splitlines() if line != "\b"]
    return "\n".join(lines)


class KaldiCommand(click.Command):
    """A click command whose help is Kaldi's usage text verbatim (it has its
    own ``Usage:`` line, so click's is left out), then the options."""

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        pass

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write(kaldi_usage_text(self.help or "") + "\n")

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        # click makes its --help option on the first parse through its
        # help_option decorator, whose help text goes through gettext: the
        # one translation lookup of a run (importing locale, looking for
        # message catalogues: ~1.8 ms of every binary's start-up).  The same
        # option, made here with the text as it is (Kaldi's binaries speak
        # English), once per command as click caches it.
        names = self.get_help_option_names(ctx)
        if not names or not self.add_help_option:
            return None
        if getattr(self, "_help_option", None) is None:
            self._help_option = click.Option(
                names, is_flag=True, expose_value=False, is_eager=True,
                help="Show this message and exit.", callback=_show_help)
        return self._help_option


def _show_help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """The --help callback (click's own): print the help and exit."""
    if not value or ctx.resilient_parsing:
        return
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


class _ClosedStdout:
    """Stands for a stdout that was closed when the binary started (``>&-``;
    Python's ``sys.stdout`` is then None): writing to it is a clear error, as
    in Kaldi, instead of an AttributeError; nothing written, nothing said."""

    def write(self, data: Any) -> int:
        raise PynnetError("cannot write to standard output: it is closed")

    def flush(self) -> None:
        pass

    @property
    def buffer(self) -> "_ClosedStdout":
        return self

    def isatty(self) -> bool:
        return False


def _signal_behind(e: BaseException) -> type | None:
    """KeyboardInterrupt or BrokenPipeError if ``e`` is one, or was raised
    while one was being handled (a cleanup failing after Ctrl-C, e.g. a
    ``| cmd`` output pipe whose command got the SIGINT too), else None."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, (KeyboardInterrupt, BrokenPipeError)):
            return type(cur)
        cur = cur.__context__
    return None


def _pass_signals_through(f: Callable) -> Callable:
    """Let SIGINT and EPIPE inside the command reach :func:`run` as themselves
    (click would turn them into Abort and sys.exit(1))."""

    @functools.wraps(f)
    def callback(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except (Exception, KeyboardInterrupt) as e:
            behind = _signal_behind(e)
            if behind is None:
                raise
            if issubclass(behind, KeyboardInterrupt):
                raise _Interrupted() from e
            raise _OutputClosed() from e

    return callback


def kaldi_command(usage: str) -> Callable[[Callable], click.Command]:
    """Decorator making a click command with Kaldi's usage text as help."""

    def deco(f: Callable) -> click.Command:
        cmd = click.command(cls=KaldiCommand, help=usage, context_settings={
            "help_option_names": ["--help", "-h"],
            "max_content_width": 100,
        })(common_options(_pass_signals_through(f)))
        return cmd

    return deco


def check_num_args(args: Sequence[str], allowed: Sequence[int]) -> None:
    if len(args) not in allowed:
        expect = " or ".join(str(a) for a in allowed)
        raise ArgumentCountError(f"wrong number of arguments: got {len(args)}, expected {expect}")


def check_min_args(args: Sequence[str], least: int) -> None:
    """For binaries taking a list (``<nnet-in1> <nnet-in2> ... <nnet-out>``)."""
    if len(args) < least:
        raise ArgumentCountError(f"wrong number of arguments: got {len(args)}, expected at "
                                 f"least {least}")
