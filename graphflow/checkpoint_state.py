"""The ``checkpoint`` file beside a folder's checkpoints: TensorFlow's CheckpointState
in protobuf text format, naming the latest checkpoint and the ones kept::

    model_checkpoint_path: "model.ckpt-20"
    all_model_checkpoint_paths: "model.ckpt-10"
    all_model_checkpoint_paths: "model.ckpt-20"

graphflow writes the names relative to the folder (as TF 2's CheckpointManager
does), so the folder may move; a relative name is read relative to the folder, as
TensorFlow reads it (``tf.train.latest_checkpoint``, ``get_checkpoint_state``).
The file is replaced atomically (temporary file, fsync, rename).
"""
from __future__ import annotations

import contextlib
import logging
import os
import secrets

from .tf_bundle import index_filename
from .tf_bundle_proto import messages

STATE_FILE = "checkpoint"
log = logging.getLogger("graphflow.train")


def checkpoint_exists(prefix: str) -> bool:
    """Whether ``prefix`` names a checkpoint: ``<prefix>.index`` (TensorFlow's format)
    or a file ``prefix`` (graphflow's version-1 format)."""
    return os.path.isfile(index_filename(prefix)) or os.path.isfile(prefix)


def read_state(folder: str, latest_filename: str | None = None) -> tuple[str, list[str]] | None:
    """(latest checkpoint, every listed checkpoint) of ``folder``'s state file, relative
    names joined to the folder; None without a readable one (a log line says why)."""
    from google.protobuf import text_format

    path = os.path.join(folder, latest_filename or STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        log.warning("graphflow: %s: %s; checkpoint state ignored", path, e)
        return None
    try:
        state = text_format.Parse(text, messages().CheckpointState())
    except text_format.ParseError as e:
        log.warning("graphflow: %s is not a CheckpointState (%s); ignored", path, e)
        return None
    if not state.model_checkpoint_path:
        return None
    resolve = lambda p: p if os.path.isabs(p) else os.path.join(folder, p)  # noqa: E731
    return (resolve(state.model_checkpoint_path),
            [resolve(p) for p in state.all_model_checkpoint_paths])


def write_state(folder: str, latest: str, kept: list[str],
                latest_filename: str | None = None) -> None:
    """Replace ``folder``'s state file: ``latest`` is the newest checkpoint, ``kept`` all
    that are kept (oldest first; ``latest`` is added last if missing)."""
    from google.protobuf import text_format

    kept = [p for p in kept if p != latest] + [latest]
    state = messages().CheckpointState(
        model_checkpoint_path=_relative(latest, folder),
        all_model_checkpoint_paths=[_relative(p, folder) for p in kept])
    path = os.path.join(folder, latest_filename or STATE_FILE)
    tmp = os.path.join(folder, f".{STATE_FILE}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text_format.MessageToString(state))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def latest_checkpoint(checkpoint_dir: str | os.PathLike,
                      latest_filename: str | None = None) -> str | None:
    """The path of the latest checkpoint the folder's ``checkpoint`` file names, or None
    when there is no such file or the checkpoint it names is gone
    (``tf.train.latest_checkpoint``)."""
    folder = os.fsdecode(os.fspath(checkpoint_dir))
    state = read_state(folder, latest_filename)
    if state is None:
        return None
    if checkpoint_exists(state[0]):
        return state[0]
    log.error("graphflow: couldn't match files for checkpoint %s", state[0])
    return None


def _relative(prefix: str, folder: str) -> str:
    """``prefix`` relative to ``folder`` when it lies there, else absolute."""
    prefix = os.path.abspath(prefix)
    if os.path.dirname(prefix) == os.path.abspath(folder):
        return os.path.basename(prefix)
    return prefix


__all__ = ["latest_checkpoint", "read_state", "write_state", "checkpoint_exists", "STATE_FILE"]
