"""Checkpoint paths (issue 25, items 15-17): long names, folders, paths under a regular
file and names past NAME_MAX give the errors TensorFlow's Saver gives, naming the path;
a save that works restores by the path it returns."""
from __future__ import annotations

import os

import numpy as np
import pytest

import graphflow as gf

VALUE = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture
def session():
    g = gf.Graph()
    v = gf.Scope(g).variable(VALUE, name="v")
    with gf.Session(g) as sess:
        sess.run(v.initializer)
        yield sess, v


def _name_max(folder) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


#: What a checkpoint prefix's longest file name adds to it (TensorFlow's data file name).
DATA_SUFFIX = ".data-00000-of-00001"


@pytest.mark.parametrize("extra", [0, 5], ids=["name_max", "name_max_minus_5"])
def test_save_to_a_long_valid_file_name(session, tmp_path, extra):
    sess, v = session
    name = "c" * (_name_max(tmp_path) - len(DATA_SUFFIX) - extra)  # its data file: NAME_MAX
    saver = gf.train.Saver()
    path = saver.save(sess, tmp_path / name)
    assert os.path.basename(path) == name  # no temp file left:
    assert sorted(os.listdir(tmp_path)) == sorted([name + DATA_SUFFIX, name + ".index",
                                                   "checkpoint"])
    sess.run(v.assign(np.zeros_like(VALUE), read_value=False))
    saver.restore(sess, path)
    np.testing.assert_array_equal(sess.run(v), VALUE)
    assert gf.train.latest_checkpoint(tmp_path) == path


@pytest.mark.parametrize("where", ["newdir/", "", "existing", "existing/"])
def test_save_to_a_folder_is_an_error_naming_it(session, tmp_path, where):
    sess, _ = session
    (tmp_path / "existing").mkdir()
    path = "" if where == "" else os.path.join(str(tmp_path), where)
    expected = "no path specified" if where == "" else \
        f"{path} (is a directory|ends with a separator)"
    with pytest.raises(ValueError, match=expected):
        gf.train.Saver().save(sess, path)
    assert sorted(os.listdir(tmp_path)) == ["existing"] and not os.listdir(tmp_path / "existing")


@pytest.mark.parametrize("length", ["name_max_plus_1", "data_file_past_name_max"])
def test_save_with_a_name_past_name_max_is_an_invalid_argument(session, tmp_path, length):
    sess, _ = session
    n = _name_max(tmp_path) + 1 if length == "name_max_plus_1" else \
        _name_max(tmp_path) - len(DATA_SUFFIX) + 1  # the prefix fits, its data file does not
    path = str(tmp_path / ("d" * n))
    with pytest.raises(gf.errors.InvalidArgumentError, match="File name too long"):
        gf.train.Saver().save(sess, path)
    assert not os.listdir(tmp_path)


def test_save_under_a_regular_file_names_the_parent(session, tmp_path):
    sess, _ = session
    (tmp_path / "plain").write_bytes(b"x")
    with pytest.raises(ValueError, match="Parent directory of .*plain/ckpt doesn't exist"):
        gf.train.Saver().save(sess, tmp_path / "plain" / "ckpt")


@pytest.mark.parametrize("where,error,match", [
    ("plain/ckpt", gf.errors.NotFoundError, "Failed to find any matching files for .*plain/ckpt"),
    ("missing", gf.errors.NotFoundError, "Failed to find any matching files for .*missing"),
    ("e" * 300, gf.errors.InvalidArgumentError, "e{300}: File name too long"),
], ids=["under_a_file", "missing", "name_too_long"])
def test_restore_from_a_bad_path_names_it(session, tmp_path, where, error, match):
    sess, v = session
    (tmp_path / "plain").write_bytes(b"x")
    with pytest.raises(error, match=match):
        gf.train.Saver().restore(sess, os.path.join(str(tmp_path), where))
    np.testing.assert_array_equal(sess.run(v), VALUE)
