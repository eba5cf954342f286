"""bertfamily: the BERT family of encoders from one configurable code path."""

from .build import build_model
from .checkpoints.convert import CheckpointError, LoadReport
from .checkpoints.io import ModelDirectoryError
from .pretrained import from_pretrained
from .config import EncoderConfig
from .model import Model, ModelOutput
from .tokenization import Tokenizer, load_tokenizer

__version__ = "0.1.0"

__all__ = ["EncoderConfig", "Model", "ModelOutput", "build_model", "from_pretrained",
           "load_tokenizer", "Tokenizer", "CheckpointError", "LoadReport", "ModelDirectoryError"]
