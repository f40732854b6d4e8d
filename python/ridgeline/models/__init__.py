"""Models: a Hugging Face config read into the one normalised form the engine prices (``config``),
and the weight storage formats a checkpoint names (``quant``)."""
