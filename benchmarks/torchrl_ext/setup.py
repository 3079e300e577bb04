# CPU-only build of torchrl 0.14.1's C++ extension (segment trees + safetanh) against the installed torch.
# Benchmark-only: used by benchmarks/bench_replay.py to time torchrl's PrioritizedReplayBuffer with its extension.
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    name="torchrl_ext_cpu",
    ext_modules=[
        CppExtension(
            "_torchrl",  # PYBIND11_MODULE(_torchrl, m) in pybind.cpp; copied into torchrl/ as torchrl._torchrl
            ["pybind.cpp", "utils.cpp"],  # WITH_CUDA undefined: the CUDA segment trees are left out
            extra_compile_args=["-O3"],  # no -std flag: torch picks the C++ standard its headers need
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
