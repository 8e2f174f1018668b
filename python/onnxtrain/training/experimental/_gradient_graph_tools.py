"""``export_gradient_graph``: a torch model + loss as an ONNX graph that also outputs the gradients."""
import io
import os
import warnings

from ...gradient import GradientGraphBuilder

_PROTOBUF_LIMIT = 2**31 - 1


def _tensors(value, what, torch):
    """value as a list of tensors (a tensor, or a tuple/list of tensors)."""
    items = list(value) if isinstance(value, (tuple, list)) else [value]
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise TypeError(f"{what} must be a torch.Tensor or a tuple of torch.Tensor, got {type(value).__name__}")
    return items


def _check_path(path):
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"gradient_graph_path must be a str or a path, got {type(path).__name__}")
    path = os.fspath(path)
    if not path:
        raise ValueError("gradient_graph_path is empty")
    if os.path.isdir(path):
        raise IsADirectoryError(f"gradient_graph_path '{path}' is a directory; give a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"gradient_graph_path: the directory '{folder}' does not exist")
    return path


def _save(model, path):
    """Writes the model by onnxtrain's one writer (onnxtrain._files); past protobuf's 2 GiB limit the
    weights go to ``<file>.data``."""
    from ..._files import save_model
    save_model(model, path)


def export_gradient_graph(model, loss_fn, example_input, example_labels, gradient_graph_path, opset_version=12):
    """Exports ``model`` with ``loss_fn(model(example_input), example_labels)`` to ONNX, with the gradient
    of the loss with respect to each trainable parameter, and saves it to ``gradient_graph_path``.

    The graph's inputs are ``input`` (``input_0``, ``input_1``, ... for a tuple of inputs), ``labels``
    and every parameter (named as in ``model.named_parameters()``); its outputs ``output``
    (``output_0``, ... for a model returning a tuple), ``loss`` and ``<param>_grad`` for each parameter
    with ``requires_grad``. It uses standard ONNX operators only where onnxtrain can (a warning names any
    other operator), so it runs in any ONNX runtime as an inference model.
    """
    import torch
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    inputs = _tensors(example_input, "example_input", torch)
    labels = _tensors(example_labels, "example_labels", torch)
    if len(labels) != 1:
        raise TypeError("example_labels must be one torch.Tensor")
    path = _check_path(gradient_graph_path)
    if isinstance(opset_version, bool) or not isinstance(opset_version, int) or opset_version < 7:
        raise ValueError(f"opset_version must be an int >= 7, got {opset_version!r}")

    named = list(model.named_parameters())
    trainable = [n for n, p in named if p.requires_grad]
    if not trainable:
        raise ValueError("model has no parameter with requires_grad: there is no gradient to export")
    buffers = {k: v.detach().clone() for k, v in model.named_buffers()}
    try:
        _export(model, loss_fn, inputs, labels[0], named, trainable, path, opset_version, torch)
    finally:  # running the model (tracing) must not move its running statistics
        with torch.no_grad():
            for k, v in model.named_buffers():
                v.copy_(buffers[k])


def _export(model, loss_fn, inputs, labels, named, trainable, path, opset_version, torch):
    import onnx
    param_names = [n for n, _ in named]
    input_names = ["input"] if len(inputs) == 1 else [f"input_{i}" for i in range(len(inputs))]
    with torch.no_grad():
        out = model(*inputs)
    n_out = len(out) if isinstance(out, (tuple, list)) else 1
    output_names = ["output"] if n_out == 1 and not isinstance(out, (tuple, list)) else \
        [f"output_{i}" for i in range(n_out)]
    reserved = set(input_names) | set(output_names) | {"labels", "loss"}
    clash = sorted(reserved & set(param_names))
    if clash:
        raise ValueError(f"parameters {clash} have the names of the graph's inputs/outputs {sorted(reserved)}")

    n_in = len(inputs)

    class _WithLoss(torch.nn.Module):
        # The parameters are explicit inputs, so that the exported graph takes them as graph inputs.
        def forward(self, *args):
            y = model(*args[:n_in])
            outs = tuple(y) if isinstance(y, (tuple, list)) else (y,)
            return (*outs, loss_fn(y, args[n_in]))

    f = io.BytesIO()
    batch = {0: "batch_size"}
    dynamic = {n: batch for n in input_names + output_names + ["labels"]}
    torch.onnx.export(_WithLoss(), (*inputs, labels, *(p for _, p in named)), f, export_params=True,
                      opset_version=opset_version, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING, input_names=input_names + ["labels"] + param_names,
                      output_names=output_names + ["loss"], dynamic_axes=dynamic)
    builder = GradientGraphBuilder(f.getvalue(), set(output_names) | {"loss"}, set(trainable), "loss", portable=True)
    builder.build()
    grad_model = onnx.load_model_from_string(builder.get_model())
    order = output_names + ["loss"] + [f"{n}_grad" for n in trainable]
    by_name = {o.name: o for o in grad_model.graph.output}
    missing = [n for n in order if n not in by_name]
    if missing:
        raise RuntimeError(f"the gradient graph lacks the outputs {missing}")
    outputs = [by_name[n] for n in order]
    del grad_model.graph.output[:]
    grad_model.graph.output.extend(outputs)
    other = sorted({f"{n.domain}.{n.op_type}" for n in grad_model.graph.node if n.domain not in ("", "ai.onnx")})
    if other:
        warnings.warn(f"export_gradient_graph: the gradient graph needs operators outside the standard ONNX domain "
                      f"{other}; it runs in onnxtrain but not in other ONNX runtimes", RuntimeWarning)
    _save(grad_model, path)
