"""Recording of named intermediate tensors, for inspection and step-by-step tests.

Layers accept an optional `trace=` argument; when it is given they record the tensors they
compute, under names scoped like the layer tree (`layers/0/self_attention/queries`). Without it
they record nothing and cost nothing.
"""


class Trace:
    """An ordered name -> tensor map, with scoped views that share it."""

    def __init__(self, tensors=None, prefix=""):
        self.tensors = {} if tensors is None else tensors
        self.prefix = prefix

    def record(self, name, value):
        self.tensors[self.prefix + name] = value

    def scope(self, name):
        """A view whose records land in the same map, under `name/`."""
        return Trace(self.tensors, f"{self.prefix}{name}/")

    def numpy(self):
        """The recorded tensors as NumPy arrays, in recording order."""
        return {name: value.numpy() for name, value in self.tensors.items()}


def scoped(trace, name):
    """`trace.scope(name)`, or None when nothing is traced."""
    return None if trace is None else trace.scope(name)
