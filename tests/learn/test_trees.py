"""The NumPy tree walker against XGBoost itself: same predictions to the bit, same SHAP values,
on the bundled surrogate and on models trained here with missing values and uneven depths."""

import json
import subprocess
import sys

import numpy as np
import pytest
import xgboost as xgb

from advisor.core.errors import AdvisorError
from advisor.learn import xgboost_native
from advisor.learn.trees import BOXES_AT_ONCE, NUMPY_ROWS, TreeEnsemble, TreeModelError
from advisor.predict.predictor import bundled_models_dir


def _bundled() -> tuple[xgb.Booster, TreeEnsemble]:
    raw = (bundled_models_dir() / "throughput.model.json").read_bytes()
    booster = xgb.Booster()
    booster.load_model(bytearray(raw))
    return booster, TreeEnsemble(raw)


def _rows(n: int, features: int, seed: int = 0, missing: float = 0.05) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)) * 3 + 2
    x[rng.random(x.shape) < missing] = np.nan
    return x


def test_bundled_model_predictions_equal_xgboost_to_the_bit():
    booster, trees = _bundled()
    x = _rows(NUMPY_ROWS + 300, trees.num_features)
    expected = booster.inplace_predict(x).reshape(len(x), -1)
    # Below the threshold the walk is ours; above it XGBoost's: both must agree exactly.
    assert np.array_equal(trees.predict(x[:NUMPY_ROWS]), expected[:NUMPY_ROWS])
    assert np.array_equal(trees.predict(x[:1]), expected[:1])
    assert np.array_equal(trees.predict(x), expected)


def test_bundled_model_shap_values_equal_xgboost():
    booster, trees = _bundled()
    x = _rows(12, trees.num_features, seed=1)
    expected = booster.predict(xgb.DMatrix(x, feature_names=booster.feature_names),
                               pred_contribs=True)
    for target in range(trees.num_targets):
        got = trees.contributions(x, target)
        assert np.allclose(got, expected[:, target, :], atol=2e-6), target
        # Efficiency: the values add up to the prediction.
        assert np.allclose(got.sum(axis=1), trees.predict(x)[:, target], atol=1e-4)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_models_with_missing_values_and_uneven_trees(depth):
    rng = np.random.default_rng(depth)
    x = _rows(400, 6, seed=depth, missing=0.2)
    y = np.nan_to_num(x[:, 0]) * 2 - np.nan_to_num(x[:, 3]) + rng.normal(size=len(x))
    booster = xgb.train({"max_depth": depth, "eta": 0.3, "min_child_weight": 8,
                         "tree_method": "hist", "seed": 0}, xgb.DMatrix(x, label=y),
                        num_boost_round=25)
    trees = TreeEnsemble(booster.save_raw("json"))
    test = _rows(200, 6, seed=99, missing=0.3)
    assert np.array_equal(trees.predict(test), booster.inplace_predict(test)[:, None])
    shap = booster.predict(xgb.DMatrix(test), pred_contribs=True)
    assert np.allclose(trees.contributions(test), shap, atol=2e-5)


def test_predicting_never_imports_xgboost():
    # A few rows are walked here; a batch goes to XGBoost's library through its C API. Neither
    # imports the package (and with it scikit-learn and SciPy).
    code = ("import sys\n"
            "from advisor.learn.trees import NUMPY_ROWS, TreeEnsemble\n"
            "from advisor.predict.predictor import bundled_models_dir\n"
            "t = TreeEnsemble((bundled_models_dir() / 'throughput.model.json').read_bytes())\n"
            "import numpy as np\n"
            "t.predict(np.zeros((3, t.num_features))); t.contributions(np.zeros((2, "
            "t.num_features)))\n"
            "t.predict(np.zeros((NUMPY_ROWS + 1, t.num_features)))\n"
            "assert 'xgboost' not in sys.modules, 'xgboost imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_the_library_beside_the_package_batches_go_through_xgboost(monkeypatch):
    booster, _ = _bundled()
    monkeypatch.setattr(xgboost_native, "library_path", lambda: None)
    monkeypatch.setattr(xgboost_native, "_library", None)
    trees = TreeEnsemble(booster.save_raw("json"))
    x = _rows(NUMPY_ROWS + 10, trees.num_features, seed=3)
    assert np.array_equal(trees.predict(x), booster.inplace_predict(x).reshape(len(x), -1))
    assert isinstance(trees._booster, xgb.Booster)


def test_the_library_s_errors_say_what_failed_without_its_stack_trace():
    _, trees = _bundled()
    native = xgboost_native.load(trees.raw)
    with pytest.raises(AdvisorError, match=rf"could not predict: .*\(5 vs\. "
                                           rf"{trees.num_features}\)") as error:
        native.predict(np.zeros((4, 5), dtype=np.float32))
    assert "Stack trace" not in str(error.value)
    assert native.predict(np.zeros((0, trees.num_features))).shape == (0,)


@pytest.mark.parametrize("raw", [b"", b"{}", b"[1]", b'{"learner": {"gradient_booster": 3}}',
                                 b"\xff\xfe", b"[" * 100_000])
def test_anything_but_a_tree_model_is_refused(raw):
    with pytest.raises(TreeModelError):
        TreeEnsemble(raw)


def test_a_split_on_a_feature_the_model_lacks_is_refused():
    _, trees = _bundled()
    model = json.loads(trees.raw)
    model["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"][0] = 10_000
    with pytest.raises(TreeModelError, match="feature or child"):
        TreeEnsemble(json.dumps(model).encode())


@pytest.mark.parametrize(("damage", "message"), [
    # A child pointing back at the root: an endless path, refused instead of walked forever.
    (lambda tree: tree["left_children"].__setitem__(1, 0), "more than 8 splits deep"),
    (lambda tree: tree["right_children"].append(3), "right_children does not have one entry"),
    (lambda tree: tree["split_conditions"].__setitem__(2, "x"), "a tree is damaged"),
    (lambda tree: tree.update(left_children=[]), "a tree has no nodes"),
])
def test_a_damaged_tree_is_refused(damage, message):
    _, trees = _bundled()
    model = json.loads(trees.raw)
    damage(model["learner"]["gradient_booster"]["model"]["trees"][5])
    with pytest.raises(TreeModelError, match=message):
        TreeEnsemble(json.dumps(model).encode())


def test_the_largest_output_over_a_box_bounds_every_row_in_it():
    """`max_outputs` over a box is at least every prediction inside it, exactly the
    prediction where the box is one point (each tree reaches one leaf), and a missing value
    reaches only each split's default side."""
    _, trees = _bundled()
    x = _rows(2000, trees.num_features, seed=3, missing=0.1)
    low, high = np.nanmin(x, axis=0), np.nanmax(x, axis=0)
    missing = np.isnan(x).any(axis=0)
    most = trees.max_outputs(low, high, missing)
    assert (trees.predict(x) <= most).all()
    point = x[:1].copy()
    point[0, np.isnan(point[0])] = 0.0
    exact = trees.max_outputs(point[0], point[0], np.zeros(trees.num_features, dtype=bool))
    assert (exact >= trees.predict(point)[0]).all()
    assert np.allclose(exact, trees.predict(point)[0], atol=1e-3)   # float32 slack only
    gap = np.full((1, trees.num_features), np.nan)
    unknown = trees.max_outputs(gap[0], gap[0], np.ones(trees.num_features, bool))
    assert (unknown >= trees.predict(gap)[0]).all()
    assert np.allclose(unknown, trees.predict(gap)[0], atol=1e-3)
    # Wider boxes never bound lower.
    assert (trees.max_outputs(np.full_like(low, -np.inf), np.full_like(high, np.inf),
                              np.ones_like(missing)) >= most - 1e-6).all()


def test_many_boxes_at_once_bound_as_each_alone():
    """(boxes × features) gives each box's own bound, across `BOXES_AT_ONCE` chunks, and a
    row's own box (a point) is its prediction."""
    _, trees = _bundled()
    x = _rows(BOXES_AT_ONCE + 7, trees.num_features, seed=5, missing=0.0)
    low, high = x - 0.5, x + 0.5
    missing = np.zeros_like(x, dtype=bool)
    together = trees.max_outputs(low, high, missing)
    assert together.shape == (len(x), trees.num_targets)
    alone = np.array([trees.max_outputs(low[i], high[i], missing[i]) for i in range(len(x))])
    assert np.array_equal(together, alone)
    assert (together >= trees.predict(x)).all()
    assert np.allclose(trees.max_outputs(x, x, missing), trees.predict(x), atol=1e-3)
