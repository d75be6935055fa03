"""Which of POT's test items run against tokenflow.pot, and which are expected to differ.

Keys are "FILE::TEST" (every parametrization of the test) or "FILE::TEST[PARAMS]" (one item).
"""

# POT's test items that call functions tokenflow.pot does not offer: not run (by test function name,
# or function name and parameters).
EXCLUDED = {
    "test_ot.py::test_lp_barycenter": "ot.lp.barycenter",
    "test_ot.py::test_lp_barycenter_cvxopt": "ot.lp.barycenter",
    "test_ot.py::test_free_support_barycenter": "ot.lp.free_support_barycenter",
    "test_ot.py::test_free_support_barycenter_backends": "ot.lp.free_support_barycenter",
    "test_bregman.py::test_convergence_warning[sinkhorn]": "ot.barycenter",
    "test_bregman.py::test_convergence_warning[sinkhorn_stabilized]": "ot.barycenter",
    "test_bregman.py::test_convergence_warning[sinkhorn_log]": "ot.barycenter",
    "test_bregman.py::test_not_implemented_method": "ot.barycenter, ot.bregman.convolutional_barycenter2d",
    "test_bregman.py::test_barycenter": "ot.bregman.barycenter",
    "test_bregman.py::test_barycenter_debiased": "ot.bregman.barycenter_debiased",
    "test_bregman.py::test_convergence_warning_barycenters": "ot.bregman.barycenter",
    "test_bregman.py::test_barycenter_stabilization": "ot.bregman.barycenter",
    "test_bregman.py::test_wasserstein_bary_2d": "ot.bregman.convolutional_barycenter2d",
    "test_bregman.py::test_wasserstein_bary_2d_debiased": "ot.bregman.convolutional_barycenter2d_debiased",
    "test_bregman.py::test_unmix": "ot.bregman.unmix",
    "test_bregman.py::test_implemented_methods": "ot.bregman.barycenter",
    "test_bregman.py::test_screenkhorn": "ot.bregman.screenkhorn",
    "test_bregman.py::test_convolutional_barycenter_non_square": "ot.bregman.convolutional_barycenter2d",
    "test_utils.py::test_proj_simplex": "ot.utils.proj_simplex",
    "test_utils.py::test_parmap": "ot.utils.parmap",
    "test_utils.py::test_tic_toc": "ot.tic, ot.toc (POT's timers, tested for themselves)",
    "test_utils.py::test_kernel": "ot.utils.kernel",
    "test_utils.py::test_dist0": "ot.utils.dist0 (tested for itself)",
    "test_utils.py::test_dots": "ot.utils.dots",
    "test_utils.py::test_clean_zeros": "ot.utils.clean_zeros",
    "test_utils.py::test_cost_normalization": "ot.utils.cost_normalization",
    "test_utils.py::test_check_params": "ot.utils.check_params",
    "test_utils.py::test_deprecated_func": "ot.utils.deprecated",
    "test_utils.py::test_BaseEstimator": "ot.utils.BaseEstimator",
}

# Items where tokenflow.pot is deliberately different: expected to fail (strict: one that passes
# is reported, so the list stays true). Empty: every selected item POT passes passes here.
DIFFERENT = {}

HELPERS = {"": ("backend", "datasets", "tic", "toc", "toq"), "utils": ("dist0",), "lp": ("cvx",)}


def listed(key: str, table: dict):
    """The entry of `table` for the item "FILE::TEST[PARAMS]": its own, else its test function's."""
    if key in table:
        return table[key]
    return table.get(key.split("[", 1)[0])
