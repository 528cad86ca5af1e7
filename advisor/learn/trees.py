"""Predictions and SHAP values of a trained XGBoost model, computed with NumPy from the model's
JSON form.

XGBoost trains the surrogates (`surrogate.train_throughput`, `power_surrogate.train_power`);
answering with them needs only the trees. Importing xgboost costs 0.15 s, and 1.4 s where
scikit-learn is installed (as NeMo installs it: xgboost imports it, and it imports SciPy's
statistics), which is most of a `recommend` — so prediction reads the trees from XGBoost's own
JSON model format (`Booster.save_model("*.json")`, documented in XGBoost's "Introduction to
Model IO") and walks them here; batches too large for NumPy go to XGBoost's C library through
its C API (`xgboost_native`), still without importing the package. Tests check all three
against XGBoost's `inplace_predict` and `predict(pred_contribs=True)` on the bundled model.

Prediction follows XGBoost's rules: features as float32, a row goes left when its value is
below the split condition, a missing value (NaN) goes the node's default way, and each
target's leaf values are added to its base score in tree order in float32. SHAP values are
the exact Shapley values of the path-dependent expectation TreeSHAP uses (Lundberg et al.
2020, Algorithm 1: a feature outside the coalition follows both children weighted by their
training cover), enumerated over each tree's few features instead of TreeSHAP's path
recursion: with depth-3 trees a tree splits on at most 7 features, 128 coalitions.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np

from advisor.core.errors import AdvisorError
from advisor.learn import xgboost_native

NUMPY_ROWS = 512
"""Up to this many rows the trees are walked here (a configuration in 0.1 ms, 512 in ~20 ms);
more go to XGBoost's C++ predictor (the bundled 1,200 trees at about 80,000-100,000 rows/s on
two cores; loaded once through its C API without importing the xgboost package:
`xgboost_native`), which gives the same numbers to the bit."""
BOXES_AT_ONCE = 64
"""`max_outputs` walks this many boxes together (64 × 1,200 trees × 8 leaves of flags)."""
MOST_DEPTH = 8
"""Trees are walked as complete binary trees of the deepest tree's depth (2**depth leaves
each); the surrogates grow depth 3."""
MOST_TREE_FEATURES = 10
"""SHAP enumerates 2**k coalitions for a tree splitting on k features; deeper trees than the
surrogates grow (depth 3: k <= 7) are refused rather than enumerated."""


class TreeModelError(AdvisorError):
    """A JSON model this module cannot read (not XGBoost's format, or a kind of tree it does
    not walk)."""


class TreeEnsemble:
    """The trees of one XGBoost model (`gbtree`, numerical splits, one output per tree), read
    from `raw`, the model in XGBoost's JSON format (kept: it is what `save` writes)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = bytes(raw)
        try:
            learner = json.loads(self.raw)["learner"]
            booster = learner["gradient_booster"]
            trees = booster["model"]["trees"]
            group = np.asarray(booster["model"]["tree_info"], dtype=np.intp)
            params = learner["learner_model_param"]
            self.feature_names: list[str] = list(learner.get("feature_names", []))
            self.num_features = int(params["num_feature"])
            self.num_targets = max(int(params.get("num_target", 1)),
                                   int(params.get("num_class", 0)), 1)
            base = params["base_score"]
            values = json.loads(base) if base.startswith("[") else [float(base)]
            self.base_score = np.asarray(values, dtype=np.float32).reshape(-1)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            raise TreeModelError(f"not an XGBoost JSON model ({type(e).__name__}: {e})") \
                from None
        if booster.get("name") != "gbtree" or not trees:
            raise TreeModelError(f"booster {booster.get('name')!r} with {len(trees)} trees: "
                                 f"only gbtree models with trees are read")
        if len(self.base_score) == 1:
            self.base_score = np.repeat(self.base_score, self.num_targets)
        if (len(trees) != len(group) or len(self.base_score) != self.num_targets
                or group.min() < 0 or group.max() >= self.num_targets):
            raise TreeModelError("tree_info or base_score does not match the trees")
        self.group = group
        self._read(trees)
        self._heap()
        self._booster = None
        self._path_cache: dict[int, _Paths] = {}

    def _read(self, trees: list[dict]) -> None:
        """Every tree as XGBoost stores it, padded to the largest: (trees × nodes) arrays,
        each filled from all trees' lists at once."""
        try:
            sizes = np.array([len(t["left_children"]) for t in trees], dtype=np.intp)
            if not sizes.all():
                raise TreeModelError("a tree has no nodes")
            if any(any(t.get("split_type", [])) or int(
                    t.get("tree_param", {}).get("size_leaf_vector", "1")) > 1 for t in trees):
                raise TreeModelError("categorical splits or vector leaves are not read")
            shape = (len(trees), int(sizes.max()))
            tree = np.repeat(np.arange(len(trees)), sizes)
            node = np.arange(len(tree)) - np.repeat(np.cumsum(sizes) - sizes, sizes)

            def column(key: str, dtype: type, fill: object) -> np.ndarray:
                if any(len(t[key]) != n for t, n in zip(trees, sizes, strict=True)):
                    raise TreeModelError(f"a tree's {key} does not have one entry per node")
                out = np.full(shape, fill, dtype=dtype)
                out[tree, node] = np.fromiter(itertools.chain.from_iterable(
                    t[key] for t in trees), dtype=dtype, count=len(tree))
                return out

            self.left = column("left_children", np.intp, -1)
            self.right = column("right_children", np.intp, -1)
            self.feature = column("split_indices", np.intp, 0)
            # A leaf's value is its split condition (XGBoost stores it there).
            self.condition = column("split_conditions", np.float32, 0.0)
            self.default_left = column("default_left", bool, False)
            self.cover = column("sum_hessian", np.float64, 0.0)
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise TreeModelError(f"a tree is damaged ({type(e).__name__}: {e})") from None
        self.leaf = self.left < 0
        inner = ~self.leaf
        nodes = shape[1]
        if ((self.feature[inner] < 0) | (self.feature[inner] >= self.num_features)).any() or (
                (self.left[inner] >= nodes) | (self.right[inner] >= nodes)
                | (self.right[inner] < 0)).any():
            raise TreeModelError("a split names a feature or child the model does not have")
        self.positions = self._levels(MOST_DEPTH)
        """(trees × positions) the XGBoost node at each position of the complete trees."""
        # Levels 0..depth hold 2**(depth + 1) - 1 positions.
        self.depth = self.positions.shape[1].bit_length() - 1

    def _levels(self, depth: int, *, whole: bool = False) -> np.ndarray:
        """Every tree as a complete binary tree in heap order (position h has children 2h+1
        and 2h+2), where a leaf above the bottom is copied to both its children: (trees ×
        positions) the XGBoost node at each position, down to the level where every tree
        has reached its leaves, or to `depth` levels below the root where `whole`. A tree
        deeper than `depth` is refused."""
        rows = np.arange(len(self.group))[:, None]
        levels = [np.zeros((len(rows), 1), dtype=np.intp)]
        while len(levels) <= depth and (whole or not self.leaf[rows, levels[-1]].all()):
            node = levels[-1]
            leaf = self.leaf[rows, node]
            levels.append(np.stack([np.where(leaf, node, self.left[rows, node]),
                                    np.where(leaf, node, self.right[rows, node])],
                                   axis=2).reshape(len(rows), -1))
        if not self.leaf[rows, levels[-1]].all():
            raise TreeModelError(f"trees more than {depth} splits deep; at most "
                                 f"{MOST_DEPTH} are walked")
        return np.hstack(levels)

    def _heap(self) -> None:
        """Every tree as a complete binary tree of `depth` levels in heap order (node h has
        children 2h+1 and 2h+2): a leaf above the bottom becomes splits that every row passes
        to the left, down to copies of its value."""
        inner = 2 ** self.depth - 1
        node = self.positions
        split = node[:, :max(inner, 1)]          # depth 0: the leaf as a placeholder split
        real = ~self.leaf[np.arange(len(node))[:, None], split]
        take = np.take_along_axis
        self.heap_feature = np.where(real, take(self.feature, split, axis=1), 0)
        self.heap_condition = np.where(real, take(self.condition, split, axis=1),
                                       np.float32(np.inf))
        self.heap_default_left = np.where(real, take(self.default_left, split, axis=1), True)
        self.heap_value = take(self.condition, node[:, inner:], axis=1)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """(rows × targets) predictions, as XGBoost's `inplace_predict` gives them."""
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise TreeModelError(f"expected rows of {self.num_features} features, got shape "
                                 f"{x.shape}")
        if len(x) > NUMPY_ROWS:
            return self._xgboost_predict(x)
        leaves = self._leaf_values(x)
        out = np.empty((len(x), self.num_targets), dtype=np.float32)
        for target in range(self.num_targets):
            start = np.full((len(x), 1), self.base_score[target])
            # Sequential float32 sums in tree order, as XGBoost accumulates.
            out[:, target] = np.cumsum(np.hstack([start, leaves[:, self.group == target]]),
                                       axis=1, dtype=np.float32)[:, -1]
        return out

    def _leaf_values(self, x: np.ndarray) -> np.ndarray:
        """(rows × trees) the value of the leaf each row reaches in each tree."""
        count = len(self.group)
        trees = np.arange(count)
        if not self.depth:
            return np.broadcast_to(self.heap_value[:, 0], (len(x), count))
        value = x[:, self.heap_feature.reshape(-1)].reshape(len(x), count, -1)
        left = value < self.heap_condition
        missing = np.isnan(value)
        if missing.any():
            left = np.where(missing, self.heap_default_left, left)
        position = np.zeros((len(x), count), dtype=np.intp)
        for level in range(self.depth):
            node = (2 ** level - 1) + position
            went_left = np.take_along_axis(left, node[..., None], axis=2)[..., 0]
            position = 2 * position + ~went_left
        return self.heap_value[trees, position]

    def max_outputs(self, low: np.ndarray, high: np.ndarray, may_be_missing: np.ndarray
                    ) -> np.ndarray:
        """The largest prediction each target can give (targets) for any row whose features
        lie within [low, high] (per feature; -inf/inf where unknown), NaN allowed where
        `may_be_missing`: each tree's largest leaf among those such a row can reach, added to
        the base score, plus the float32 sum's worst rounding. A bound, not a prediction:
        every row of the box predicts at most this. Several boxes at once: (boxes × features)
        arrays give (boxes × targets)."""
        low = np.asarray(low, dtype=np.float32)
        if low.ndim == 1:
            return self.max_outputs(low[None], np.asarray(high)[None],
                                    np.asarray(may_be_missing)[None])[0]
        high = np.asarray(high, dtype=np.float32)
        missing = np.asarray(may_be_missing, dtype=bool)
        return np.vstack([self._box_maxima(low[i:i + BOXES_AT_ONCE],
                                           high[i:i + BOXES_AT_ONCE],
                                           missing[i:i + BOXES_AT_ONCE])
                          for i in range(0, max(len(low), 1), BOXES_AT_ONCE)])

    def _box_maxima(self, low: np.ndarray, high: np.ndarray, missing: np.ndarray
                    ) -> np.ndarray:
        """`max_outputs` for (boxes × features) arrays."""
        boxes, count = len(low), len(self.group)
        reach = np.ones((boxes, count, 1), dtype=bool)
        for level in range(self.depth):
            nodes = (2 ** level - 1) + np.arange(2 ** level)
            feature = self.heap_feature[:, nodes]
            condition = self.heap_condition[:, nodes]
            default_left = self.heap_default_left[:, nodes]
            # A row goes left when its value is below the condition (NaN: the default way);
            # the padding splits (condition inf) send every row left.
            unknown = missing[:, feature]
            left = (low[:, feature] < condition) | (unknown & default_left)
            right = (high[:, feature] >= condition) | (unknown & ~default_left)
            nxt = np.empty((boxes, count, 2 ** (level + 1)), dtype=bool)
            nxt[..., 0::2] = reach & left
            nxt[..., 1::2] = reach & right
            reach = nxt
        best = np.where(reach, self.heap_value, -np.inf).max(axis=2).astype(np.float64)
        out = np.empty((boxes, self.num_targets))
        for target in range(self.num_targets):
            leaves, base = best[:, self.group == target], float(self.base_score[target])
            # XGBoost adds in float32, in tree order: allow that sum's worst rounding.
            slack = (leaves.shape[1] + 1) * np.finfo(np.float32).eps * (
                abs(base) + np.abs(leaves).sum(axis=1))
            out[:, target] = base + leaves.sum(axis=1) + slack
        return out

    def _xgboost_predict(self, x: np.ndarray) -> np.ndarray:
        if self._booster is None:
            self._booster = xgboost_native.load(self.raw) or _python_booster(self.raw)
        if isinstance(self._booster, xgboost_native.NativeBooster):
            return self._booster.predict(x).reshape(len(x), self.num_targets)
        return np.asarray(self._booster.inplace_predict(x)).reshape(len(x), self.num_targets)

    def contributions(self, x: np.ndarray, target: int = 0) -> np.ndarray:
        """(rows × (features + 1)) SHAP values of one target's trees, bias last: what
        XGBoost's `predict(pred_contribs=True)` gives for that target."""
        x = np.asarray(x, dtype=np.float32)
        paths = self._paths(target)
        out = np.zeros((len(x), self.num_features + 1))
        for row, values in enumerate(x):
            out[row] = paths.shap(values, self.num_features)
        out[:, -1] += self.base_score[target]
        return out

    def _paths(self, target: int) -> _Paths:
        if target not in self._path_cache:
            self._path_cache[target] = _Paths(self, np.flatnonzero(self.group == target))
        return self._path_cache[target]


class _Paths:
    """Each tree's root-to-leaf paths and its coalitions, for SHAP values."""

    def __init__(self, trees: TreeEnsemble, which: np.ndarray) -> None:
        depth = max(trees.depth, 1)
        width = 2 ** depth
        count = len(which)
        rows, t = np.arange(count), which[:, None, None]
        # The XGBoost node at each position (a one-leaf ensemble is walked one level deep).
        heap = (trees.positions if trees.depth else trees._levels(depth, whole=True))[which]
        # Leaf l's path in a complete tree: the position at each level, the child it goes
        # to, and whether it goes left.
        levels, leaf = np.arange(depth), np.arange(width)[:, None]
        position = (2 ** levels - 1) + (leaf >> (depth - levels))          # (width × depth)
        below = leaf >> (depth - 1 - levels)             # the child's index in its level
        node, child = heap[:, position], heap[:, (2 ** (levels + 1) - 1) + below]
        went_left = np.broadcast_to(below % 2 == 0, node.shape)
        # A leaf above the bottom is copied down as splits every row passes to the left:
        # not a feature, and only its leftmost copy is a leaf of the tree.
        passes = trees.leaf[t, node]
        fraction = np.divide(trees.cover[t, child], trees.cover[t, node],
                             out=went_left.astype(float), where=~passes)
        real = ~(passes & ~went_left).any(axis=2)                         # (count × width)
        # Tree-local feature numbers in order of first use, root first and left before right
        # (each tree's features index its coalitions' bits).
        local = np.full((count, trees.num_features), -1, dtype=np.intp)
        self.size = np.zeros(count, dtype=np.intp)
        for h in _preorder(depth):
            split = ~trees.leaf[which, heap[:, h]]
            f = trees.feature[which, heap[:, h]]
            new = split & (local[rows, f] < 0)
            local[rows[new], f[new]] = self.size[new]
            self.size += new
        slot = np.where(passes, -1, local[rows[:, None, None], trees.feature[t, node]])
        # The tree's leaves first, in order, then placeholders that add nothing.
        order = np.argsort(~real, axis=1, kind="stable")
        keep = np.take_along_axis(real, order, axis=1)[..., None]

        def leaves_first(a: np.ndarray, placeholder: object) -> np.ndarray:
            return np.where(keep, np.take_along_axis(a, order[..., None], axis=1), placeholder)

        self.slot = leaves_first(slot, -1)                    # tree-local feature
        self.node = np.where(self.slot >= 0, leaves_first(node, 0), 0)   # split node
        self.went_left = leaves_first(went_left, True)
        self.fraction = leaves_first(fraction, 1.0)           # cover(child) / cover(node)
        self.value = np.where(keep[..., 0], np.take_along_axis(
            trees.condition[which[:, None], heap[:, width - 1:]].astype(float), order, axis=1),
            0.0)
        self.tree = which
        most = int(self.size.max(initial=0))
        if most > MOST_TREE_FEATURES:
            raise TreeModelError(f"a tree splits on {most} features; SHAP values are "
                                 f"enumerated for at most {MOST_TREE_FEATURES}")
        self.slots = most
        self.global_feature = np.zeros((count, max(most, 1)), dtype=np.intp)
        tree, feature = np.nonzero(local >= 0)
        self.global_feature[tree, local[tree, feature]] = feature
        masks = np.arange(2 ** most)
        # member[m, i, leaf, d]: the path's feature at d is in coalition m.
        bits = (masks[:, None, None, None] >> np.maximum(self.slot, 0)[None]) & 1
        self.member = (bits == 1) & (self.slot >= 0)[None]
        self.masks = masks
        popcount = np.array([bin(m).count("1") for m in masks])
        # Shapley weight |S|! (k - |S| - 1)! / k! of a coalition S (without the feature) in a
        # tree of k features; zero for coalitions using slots the tree does not have.
        k = self.size[:, None]
        s = popcount[None, :]
        valid = (masks[None, :] < (1 << k)) & (s < k)
        self.weight = np.where(valid, _factorial(s) * _factorial(np.maximum(k - s - 1, 0))
                               / _factorial(k), 0.0)
        self.trees = trees

    def shap(self, x: np.ndarray, num_features: int) -> np.ndarray:
        trees = self.trees
        t = self.tree[:, None, None]
        value = x[trees.feature[t, self.node]]
        left = np.where(np.isnan(value), trees.default_left[t, self.node],
                        value < trees.condition[t, self.node])
        follows = (left == self.went_left) | (self.slot < 0)
        # v(S) per coalition and tree: leaf values weighted by the path's factors (the row's
        # way for features in S, the cover fraction for the others).
        factor = np.where(self.member, follows[None], self.fraction[None])
        v = (self.value[None] * factor.prod(axis=3)).sum(axis=2)          # (coalitions, trees)
        out = np.zeros(num_features + 1)
        for i in range(self.slots):
            bit = 1 << i
            without = self.masks[(self.masks & bit) == 0]
            gain = v[without | bit] - v[without]                           # (coalitions, trees)
            has = i < self.size
            phi = np.where(has, (self.weight[:, without].T * gain).sum(axis=0), 0.0)
            np.add.at(out, self.global_feature[:, i], phi)
        out[-1] = v[0].sum()
        return out


def _python_booster(raw: bytes):
    """The model in the xgboost package (where its library is not found on its own)."""
    import xgboost as xgb

    booster = xgb.Booster()
    booster.load_model(bytearray(raw))
    booster.set_param({"nthread": 0})       # every core for a batch
    return booster


def _preorder(depth: int) -> list[int]:
    """The inner positions of a complete binary tree of `depth` levels (heap order), root
    first and each left subtree before its right."""
    out, stack = [], [0]
    while stack:
        h = stack.pop()
        if h < 2 ** depth - 1:
            out.append(h)
            stack += [2 * h + 2, 2 * h + 1]
    return out


def _factorial(n: np.ndarray) -> np.ndarray:
    return np.vectorize(math.factorial, otypes=[float])(n)
