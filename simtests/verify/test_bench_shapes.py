"""verify.bench_shapes: the layer-file loader (good files, every kind of bad file) and the realworld set."""
import json

import pytest

from conv3d_bwd.verify.bench_shapes import (
    BenchShape,
    ShapeFileError,
    load_shapes,
    realworld_shapes,
    shapes_from_json,
)

GOOD = {"name": "tube", "batch": 1, "channels": [3, 8], "input": [4, 8, 8], "kernel": [2, 4, 4],
        "stride": [2, 4, 4], "padding": 0, "dilation": 1, "dtype": "bf16", "lnc": 2, "source": "a test"}


def _write(tmp_path, data, name="layers.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_a_good_file_loads_every_field(tmp_path):
    (s,) = load_shapes(_write(tmp_path, [GOOD]))
    assert s == BenchShape("tube", 1, 3, 8, (4, 8, 8), (2, 4, 4), (2, 4, 4), (0,) * 6, (1, 1, 1), "bf16", 2,
                           "a test")
    assert s.geometry.out_size == (2, 2, 2)


def test_defaults_and_short_forms_expand():
    (s,) = shapes_from_json([{"name": "a", "batch": 2, "channels": [4, 5], "input": [6, 6, 6], "kernel": 3,
                              "padding": [1, 0, 2]}], "mem")
    assert (s.kernel, s.stride, s.dilation, s.dtype, s.lnc) == ((3, 3, 3), (1, 1, 1), (1, 1, 1), "bf16", None)
    assert s.padding == (1, 1, 0, 0, 2, 2)


@pytest.mark.parametrize("change, words", [
    ({"stride": [1, 2]}, ["layer 0 (tube)", "'stride'", "list of 3 integers"]),
    ({"channels": [3]}, ["'channels'", "[C_in, C_out]"]),
    ({"batch": 0}, ["'batch'", ">= 1"]),
    ({"batch": True}, ["'batch'", "integer"]),
    ({"padding": [1, 1, 1, 1]}, ["'padding'", "6 integers"]),
    ({"padding": -1}, ["'padding'", ">= 0"]),
    ({"dtype": "int8"}, ["'dtype'", "bf16"]),
    ({"lnc": 3}, ["'lnc'", "1 or 2"]),
    ({"source": 5}, ["'source'", "string"]),
    ({"name": ""}, ["'name'", "non-empty"]),
    ({"kernel": [9, 9, 9]}, ["not a valid convolution", "kernel"]),
    ({"colour": "red"}, ["unknown field", "colour"]),
])
def test_a_bad_field_is_named_with_its_rule(tmp_path, change, words):
    path = _write(tmp_path, [dict(GOOD, **change)])
    with pytest.raises(ShapeFileError) as err:
        load_shapes(path)
    for w in [str(path)] + words:
        assert w in str(err.value), (w, str(err.value))


@pytest.mark.parametrize("data, words", [
    ("[{", ["not valid JSON", "line 1"]),
    ({"name": "x"}, ["non-empty JSON list"]),
    ([], ["non-empty JSON list"]),
    (["tube"], ["layer 0", "JSON object"]),
    ([{"name": "x", "batch": 1}], ["layer 0", "missing required field(s) channels, input, kernel"]),
    ([GOOD, GOOD], ["layer 1", "unique"]),
])
def test_a_bad_file_is_named_with_its_rule(tmp_path, data, words):
    with pytest.raises(ShapeFileError) as err:
        load_shapes(_write(tmp_path, data))
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ShapeFileError, match="cannot read"):
        load_shapes(tmp_path / "absent.json")


def test_the_realworld_set_is_the_twelve_layers_with_their_sources():
    shapes = realworld_shapes()
    assert len(shapes) == 12 and len({s.name for s in shapes}) == 12
    assert all(s.source and s.dtype == "bf16" and s.lnc is None for s in shapes)
    tube = {s.name: s for s in shapes}["videomae_tube"]
    assert (tube.c_in, tube.c_out, tube.input, tube.kernel, tube.stride) == (3, 768, (16, 224, 224),
                                                                            (2, 16, 16), (2, 16, 16))
    assert tube.geometry.out_size == (8, 14, 14)
