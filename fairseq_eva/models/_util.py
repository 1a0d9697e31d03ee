"""Helpers shared by the model files."""

from argparse import Namespace

from omegaconf import OmegaConf


def as_namespace(args):
    """fairseq-hydra-train hands legacy (argparse) models a DictConfig: make it a flat Namespace so that
    fairseq's TransformerConfig.from_namespace copies the EVA options along with the others."""
    if OmegaConf.is_config(args):
        return Namespace(**OmegaConf.to_container(args, resolve=True))
    return args
