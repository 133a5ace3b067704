"""`params.regularization`: OpenNMT-tf's weight penalty, added to each batch's summed loss.

OpenNMT-tf 2.32 adds `l1 * sum|w| + l2 * sum w^2` (Keras' L1/L2/L1L2 regularizers, no 1/2
factor) over the trainable weights to the summed (not yet normalised) loss of every batch, so the
penalty is counted once per batch of a group and replica, then divided with the loss by the
group's token count (or example count). It skips the biases (1-D variables named `bias`) but
keeps the LayerNorm scales and offsets, the embeddings and the relative position tables.
"""

from keras import ops

from opennmt_lite.checkpointing.names import named_trainable


def penalized_weights(model):
    """The trainable weights OpenNMT-tf regularizes: all but the 1-D `bias` variables."""
    return [v for path, v in named_trainable(model).items()
            if not (len(v.shape) == 1 and path.rsplit("/", 1)[-1] == "bias")]


def weight_penalty(weights, scales):
    """l1 * sum|w| + l2 * sum w^2 over `weights` (variables or tensors: the JAX step passes the
    values it differentiates) (float32 scalar); `scales`: (l1, l2), the config's normalised
    `params.regularization["scale"]`."""
    l1, l2 = scales
    total = None
    for weight in weights:
        value = ops.cast(ops.convert_to_tensor(weight), "float32")
        term = ops.convert_to_tensor(0.0, "float32")
        if l1:
            term += l1 * ops.sum(ops.abs(value))
        if l2:
            term += l2 * ops.sum(ops.square(value))
        total = term if total is None else total + term
    return total
