// The CPython module mamba_ssm._C, and nothing else: `import mamba_ssm._C` loads the
// shared library, and loading it runs binding.cpp's TORCH_LIBRARY registrations (the ops
// live in torch.ops.mamba_ssm). Python.h is included here only, so binding.cpp's object
// depends on torch and the toolkit but not on Python: builds of one torch for several
// Pythons compile it once (mamba_build/kernels.py's object cache).
#include <Python.h>

static struct PyModuleDef mamba_ssm_c_module = {PyModuleDef_HEAD_INIT, "_C", "mamba_ssm selective-scan ops", -1,
                                                nullptr};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&mamba_ssm_c_module); }
