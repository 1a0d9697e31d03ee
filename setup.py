from setuptools import find_packages, setup

setup(
    name="fairseq-eva",
    version="0.1.0",
    description="EVA attention (Efficient Attention via Control Variates, ICLR 2023) as a fairseq plugin",
    packages=find_packages(include=["fairseq_eva", "fairseq_eva.*"]),
    package_data={"fairseq_eva.attention.kernels.c_loop": ["cpu_kernel.c"]},  # compiled on first use (README)
    python_requires=">=3.9",
    # torch and fairseq are installed by `make setup` (the pins matter: see README)
    install_requires=["numpy"],
)
