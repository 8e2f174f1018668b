"""fit time of MLPRegressor(50, 10), batch 15, 100 epochs on make_regression(1000, 100):
onnxtrain.sklearn.OrtGradientOptimizer against scikit-learn's own fit (plain SGD, same
hyper-parameters), as a ratio measured in the same run. Prints the BLAS numpy/scikit-learn use.

    bash bench/setup.sh   # once: OpenBLAS for numpy/scikit-learn (the reference BLAS is 2.5x slower)
    PYTHONPATH=build/python /usr/bin/python3 bench/bench_sklearn_fit.py [--repeat 3]
Run it with and without OPENBLAS_CORETYPE=Haswell in the environment.
"""
import argparse
import os
import time
import warnings

import numpy as np


def blas_info():
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    import sklearn.utils  # noqa: F401 (loads scikit-learn's libraries)
    found = "; ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')} "
                      f"threads={i.get('num_threads')} ({os.path.basename(i.get('filepath', ''))})"
                      for i in threadpool_info() if i.get("user_api") == "blas")
    if found:
        return found
    # threadpoolctl knows OpenBLAS, MKL and BLIS only: name the BLAS library the process mapped.
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "blas" in line.lower()})
    except OSError:
        libs = []
    return ("not OpenBLAS/MKL/BLIS per threadpoolctl; mapped: " + ", ".join(os.path.realpath(p) for p in libs)
            if libs else "unknown")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=100)
    args = ap.parse_args()
    import onnxtrain
    from sklearn.datasets import make_regression
    from sklearn.neural_network import MLPRegressor
    from onnxtrain.sklearn import LearningRateSGD, OrtGradientOptimizer, to_onnx

    X, y = make_regression(1000, 100, random_state=0)
    X = X.astype(np.float32)
    y = (y / y.std()).astype(np.float32)
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    print(f"BLAS: {blas_info()}")

    def sk_fit(seed):
        est = MLPRegressor((50, 10), solver="sgd", learning_rate_init=1e-2, momentum=0, alpha=0, batch_size=15,
                           max_iter=args.epochs, n_iter_no_change=10**6, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            est.fit(X, y)
            return time.perf_counter() - t, est

    _, est = sk_fit(0)
    onx = to_onnx(est, X)
    with_loss = onnxtrain.add_loss_output(onx)
    weights = list(onnxtrain.get_train_initializer(onx))

    def ours_fit(seed, use_numpy):
        opt = OrtGradientOptimizer(with_loss, weights, learning_rate=LearningRateSGD(5e-3, learning_rate="constant"),
                                   batch_size=15, max_iter=args.epochs, random_state=seed)
        t = time.perf_counter()
        opt.fit(X, y, use_numpy=use_numpy)
        return time.perf_counter() - t

    ours_fit(0, False)  # warm-up
    res = {"scikit-learn": [], "onnxtrain (C++ Trainer epochs)": [], "onnxtrain (Python loop, use_numpy)": []}
    for r in range(args.repeat):
        res["scikit-learn"].append(sk_fit(r)[0])
        res["onnxtrain (C++ Trainer epochs)"].append(ours_fit(r, False))
        res["onnxtrain (Python loop, use_numpy)"].append(ours_fit(r, True))
    sk = min(res["scikit-learn"])
    for name, times in res.items():
        print(f"{name:36s} best {min(times):.3f}s  median {np.median(times):.3f}s  "
              f"speed-up vs scikit-learn {sk / min(times):.2f}x")


if __name__ == "__main__":
    main()
