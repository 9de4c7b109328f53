"""Builds the converter models of tests/ml/models/ (run from the repository root):

    python -m tests.ml.make_models

Each case is a small model trained on synthetic data by scikit-learn, LightGBM or XGBoost and
converted by skl2onnx or onnxmltools, saved as ``NAME.onnx`` beside ``NAME.npz`` (the feeds the
tests run it on). Only the models and their inputs are kept; the tests compute onnxruntime's outputs
when they run. Needs (test-time only, not runtime dependencies): scikit-learn, skl2onnx, and for the
LightGBM/XGBoost cases lightgbm, xgboost and onnxmltools; a case whose package is missing is left
out with a message. The data and the training are seeded, so a rerun with the same package versions
trains the same models (the files may still differ in the graph names and opset lists the
converters generate).
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

OUT = pathlib.Path(__file__).parent / "models"
ROWS = 64  # rows each model is tested on
ML_OPSET = 3  # ai.onnx.ml opset the converters write (TreeEnsemble* v3)
OPSET = 17
BOOSTER_OPSET = 15  # the highest onnxmltools 1.16 converts to


def _data(n_features=6, n_classes=2, rows=240, seed=0, task="classification"):
    from sklearn.datasets import make_classification, make_regression

    if task == "regression":
        X, y = make_regression(n_samples=rows, n_features=n_features, noise=0.5, random_state=seed)
    else:
        X, y = make_classification(n_samples=rows, n_features=n_features, n_informative=min(4, n_features),
                                   n_redundant=0, n_classes=n_classes, n_clusters_per_class=1, random_state=seed)
    return X.astype(np.float32), y


def _skl(model, X, zipmap=True, **options):
    from skl2onnx import to_onnx

    opts = dict(options)
    if not zipmap and hasattr(model, "predict_proba"):
        opts = {id(model): {"zipmap": False, **options}}
    elif options:
        opts = {id(model): options}
    return to_onnx(model, X[:1], target_opset={"": OPSET, "ai.onnx.ml": ML_OPSET}, options=opts or None)


def sklearn_cases():
    from sklearn import svm
    from sklearn.ensemble import (ExtraTreesClassifier, GradientBoostingClassifier, GradientBoostingRegressor,
                                  RandomForestClassifier, RandomForestRegressor)
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Binarizer, Normalizer, StandardScaler
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    Xb, yb = _data(n_classes=2)
    Xm, ym = _data(n_classes=3, seed=1)
    Xr, yr = _data(task="regression", seed=2)
    Xr = Xr / np.float32(np.abs(Xr).max())
    yield "linear_regression", _skl(LinearRegression().fit(Xr, yr), Xr), {"X": Xr[:ROWS]}
    yield "ridge", _skl(Ridge(alpha=0.5).fit(Xr, yr), Xr), {"X": Xr[:ROWS]}
    for name, X, y in (("binary", Xb, yb), ("multiclass", Xm, ym)):
        lr = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(X, y)
        yield f"logistic_{name}_zipmap", _skl(lr, X), {"X": X[:ROWS]}
        yield f"logistic_{name}", _skl(lr, X, zipmap=False), {"X": X[:ROWS]}
        yield f"linear_svc_{name}", _skl(svm.LinearSVC(max_iter=5000).fit(X, y), X), {"X": X[:ROWS]}
        for kernel in ("linear", "poly", "rbf", "sigmoid"):
            for proba in (False, True):
                m = svm.SVC(kernel=kernel, probability=proba, gamma=0.2, coef0=0.5, degree=3,
                            random_state=0).fit(X, y)
                tag = "_proba" if proba else ""
                yield f"svc_{kernel}_{name}{tag}", _skl(m, X, zipmap=False), {"X": X[:ROWS]}
        yield f"decision_tree_{name}", _skl(DecisionTreeClassifier(max_depth=5, random_state=0).fit(X, y), X,
                                            zipmap=False), {"X": X[:ROWS]}
        rf = RandomForestClassifier(n_estimators=7, max_depth=5, random_state=0).fit(X, y)
        yield f"random_forest_{name}", _skl(rf, X, zipmap=False), {"X": X[:ROWS]}
        yield f"random_forest_{name}_zipmap", _skl(rf, X), {"X": X[:ROWS]}
        yield f"extra_trees_{name}", _skl(ExtraTreesClassifier(n_estimators=5, max_depth=4, random_state=0)
                                          .fit(X, y), X, zipmap=False), {"X": X[:ROWS]}
        gb = GradientBoostingClassifier(n_estimators=12, max_depth=3, random_state=0).fit(X, y)
        yield f"gradient_boosting_{name}", _skl(gb, X, zipmap=False), {"X": X[:ROWS]}
        yield f"knn_{name}", _skl(KNeighborsClassifier(5).fit(X, y), X, zipmap=False), {"X": X[:ROWS]}
        mlp = make_pipeline(PCA(4), MLPClassifier((8,), max_iter=300, random_state=0)).fit(X, y)
        yield f"pca_mlp_{name}", _skl(mlp, X, zipmap=False), {"X": X[:ROWS]}
    yield "decision_tree_regressor", _skl(DecisionTreeRegressor(max_depth=5, random_state=0).fit(Xr, yr), Xr), \
        {"X": Xr[:ROWS]}
    yield "random_forest_regressor", _skl(RandomForestRegressor(n_estimators=6, max_depth=5, random_state=0)
                                          .fit(Xr, yr), Xr), {"X": Xr[:ROWS]}
    yield "gradient_boosting_regressor", _skl(GradientBoostingRegressor(n_estimators=15, max_depth=3,
                                                                        random_state=0).fit(Xr, yr), Xr), \
        {"X": Xr[:ROWS]}
    for kernel in ("linear", "poly", "rbf", "sigmoid"):
        yield f"svr_{kernel}", _skl(svm.SVR(kernel=kernel, gamma=0.2, coef0=0.5).fit(Xr, yr), Xr), {"X": Xr[:ROWS]}
    yield "one_class_svm", _skl(svm.OneClassSVM(gamma=0.3).fit(Xb), Xb), {"X": Xb[:ROWS]}
    yield "knn_regressor", _skl(KNeighborsRegressor(4).fit(Xr, yr), Xr), {"X": Xr[:ROWS]}
    yield "normalizer_binarizer_logistic", _skl(make_pipeline(Normalizer("l2"), Binarizer(threshold=0.1),
                                                              LogisticRegression(max_iter=300)).fit(Xm, ym), Xm), \
        {"X": Xm[:ROWS]}
    for norm in ("l1", "max"):
        yield f"normalizer_{norm}", _skl(Normalizer(norm).fit(Xb), Xb), {"X": Xb[:ROWS]}
    yield from _mixed_table()


def _mixed_table():
    """A table of numbers (with missing values) and strings: ColumnTransformer with SimpleImputer +
    StandardScaler on the numbers and OneHotEncoder on the strings, then a classifier."""
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    import pandas as pd

    rng = np.random.default_rng(3)
    n = 200
    num = rng.normal(size=(n, 3)).astype(np.float32)
    num[rng.random((n, 3)) < 0.1] = np.nan
    colors = rng.choice(["red", "green", "blue", "mauve"], size=n)
    sizes = rng.choice(["S", "M", "L"], size=n)
    y = ((np.nan_to_num(num[:, 0]) + (colors == "red")) > 0.3).astype(np.int64) + (sizes == "L")
    df = pd.DataFrame({"a": num[:, 0], "b": num[:, 1], "c": num[:, 2], "color": colors, "size": sizes})
    pre = ColumnTransformer([("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()),
                              ["a", "b", "c"]),
                             ("cat", OneHotEncoder(handle_unknown="ignore"), ["color", "size"])])
    types = [(c, FloatTensorType([None, 1])) for c in "abc"] + [(c, StringTensorType([None, 1]))
                                                                  for c in ("color", "size")]
    feeds = {c: num[:ROWS, i:i + 1].copy() for i, c in enumerate("abc")}
    feeds.update(color=colors[:ROWS].reshape(-1, 1).astype(object), size=sizes[:ROWS].reshape(-1, 1).astype(object))
    feeds["color"][3, 0] = "chartreuse"  # a category not seen in training
    for name, clf in (("logistic", LogisticRegression(max_iter=500)),
                      ("random_forest", RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0))):
        model = make_pipeline(pre, clf).fit(df, y)
        for zipmap in (True, False):
            onx = to_onnx(model, initial_types=types, target_opset={"": OPSET, "ai.onnx.ml": ML_OPSET},
                          options=None if zipmap else {id(clf): {"zipmap": False}})
            yield f"mixed_table_{name}{'_zipmap' if zipmap else ''}", onx, feeds


def booster_cases():
    try:
        import lightgbm
        import onnxmltools
        import xgboost
        from onnxmltools.convert.common.data_types import FloatTensorType
    except ImportError as e:
        print(f"LightGBM/XGBoost cases left out: {e}", file=sys.stderr)
        return
    Xb, yb = _data(n_classes=2, seed=4)
    Xm, ym = _data(n_classes=3, seed=5)
    Xr, yr = _data(task="regression", seed=6)
    Xr = Xr / np.float32(np.abs(Xr).max())
    types = [("X", FloatTensorType([None, Xb.shape[1]]))]
    lgb = dict(n_estimators=12, num_leaves=8, random_state=0, verbose=-1)
    yield "lightgbm_binary", onnxmltools.convert_lightgbm(lightgbm.LGBMClassifier(**lgb).fit(Xb, yb), initial_types=types,
                                                          target_opset=BOOSTER_OPSET, zipmap=False), {"X": Xb[:ROWS]}
    yield "lightgbm_multiclass", onnxmltools.convert_lightgbm(lightgbm.LGBMClassifier(**lgb).fit(Xm, ym),
                                                              initial_types=types, target_opset=BOOSTER_OPSET,
                                                              zipmap=False), {"X": Xm[:ROWS]}
    yield "lightgbm_regressor", onnxmltools.convert_lightgbm(lightgbm.LGBMRegressor(**lgb).fit(Xr, yr),
                                                             initial_types=types, target_opset=BOOSTER_OPSET), {"X": Xr[:ROWS]}
    xgb = dict(n_estimators=10, max_depth=3, random_state=0)
    Xn = Xb.copy()
    Xn[::6, 2] = np.nan
    yield "xgboost_binary", onnxmltools.convert_xgboost(xgboost.XGBClassifier(**xgb).fit(Xn, yb), initial_types=types,
                                                        target_opset=BOOSTER_OPSET), {"X": Xn[:ROWS]}
    yield "xgboost_multiclass", onnxmltools.convert_xgboost(xgboost.XGBClassifier(**xgb).fit(Xm, ym),
                                                            initial_types=types, target_opset=BOOSTER_OPSET), {"X": Xm[:ROWS]}
    yield "xgboost_regressor", onnxmltools.convert_xgboost(xgboost.XGBRegressor(**xgb).fit(Xr, yr),
                                                           initial_types=types, target_opset=BOOSTER_OPSET), {"X": Xr[:ROWS]}


def main() -> None:
    import warnings

    warnings.simplefilter("ignore", FutureWarning)  # SVC(probability=True) is deprecated from scikit-learn 1.9
    OUT.mkdir(exist_ok=True)
    for gen in (sklearn_cases, booster_cases):
        for name, model, feeds in gen():
            (OUT / f"{name}.onnx").write_bytes(model.SerializeToString())
            np.savez_compressed(OUT / f"{name}.npz", **feeds)
            print(f"{name}: {len(model.SerializeToString()):,} bytes")


if __name__ == "__main__":
    main()
