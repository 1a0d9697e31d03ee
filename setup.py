from setuptools import find_packages, setup

setup(
    name="fairseq-eva",
    version="0.1.0",
    description="EVA attention (Efficient Attention via Control Variates, ICLR 2023) in PyTorch and as a fairseq plugin",
    packages=find_packages(include=["fairseq_eva", "fairseq_eva.*", "benchmarks", "benchmarks.*"]),
    package_data={"fairseq_eva.attention.kernels.c_loop": ["cpu_kernel.c"]},  # compiled on first use (README)
    python_requires=">=3.9",
    # the attention core needs torch and numpy; the fairseq plugin fairseq 0.12 and the hydra it was written for, as
    # pinned by the Makefile (FAIRSEQ) and requirements.txt (`make setup` installs this package with --no-deps)
    install_requires=["torch", "numpy"],
    extras_require={"fairseq": ["ve-fairseq==0.12.3", "hydra-core==1.3.2", "omegaconf==2.3.0", "numpy<2"]},
)
