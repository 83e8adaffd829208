"""`RepositoryModel`: one version of a repository model, ready to serve like a built-in one.

It is a `TorchModel`, so the worker's forward path applies to it as to a built-in
(`models.forward`: compiled or eager, precision, channels-last; JPEGs decoded on the device),
with the card's [serving] keys in place of the worker's settings (`settings`). `check` runs
synthetic batches of several sizes through it before it serves: a model whose output does not
fit its card never serves.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from inferstream.models.base import TorchModel
from inferstream.models.collate import collate
from inferstream.models.errors import ItemError, error_line
from inferstream.models.outputs import ItemOutput
from inferstream.models.repository.answers import (
    OutputMismatchError,
    OutputReader,
    class_labels,
    named_outputs,
)
from inferstream.models.repository.card import ModelCard
from inferstream.models.repository.errors import RepositoryError
from inferstream.models.repository.inputs import (
    input_preprocessor,
    synthetic_data,
    synthetic_description,
)
from inferstream.models.repository.layout import ModelVersion, read_labels
from inferstream.models.repository.loaders import Program

log = logging.getLogger(__name__)

#: the largest batch `check` runs (fewer items where the model takes fewer: `check_sizes`)
CHECK_LARGEST = 8


def check_sizes(limit: int | None) -> list[int]:
    """The batch sizes `check` runs, none above `limit` (None: no bound): an item alone (a
    `.squeeze()` breaks it), two, and CHECK_LARGEST (a batch size traced in as a constant, or
    an exported batch Dim's max, breaks the others)."""
    top = CHECK_LARGEST if limit is None else min(limit, CHECK_LARGEST)
    return sorted({1, min(2, top), top})


class RepositoryModel(TorchModel):
    """A repository model's version on a device; `version` is its number, as a string.

    `predict` answers per the card's output kind (`answers.OutputReader`). A handler's module
    gets its batch as its preprocess made it (no precision or memory format of the worker's).
    """

    def __init__(self, version: ModelVersion, card: ModelCard, program: Program,
                 device: torch.device, *, max_pixels: int) -> None:
        preprocessor = program.preprocess or input_preprocessor(card.input, max_pixels)
        labels = read_labels(version.labels) if version.labels is not None else ()
        shape = (3, *card.input.size) if card.input.kind == "image" else card.input.shape
        super().__init__(version.name, program.module, preprocessor, device, labels,
                         input_shape=shape, version=str(version.number))
        self.card = card
        self.file = version.file
        self.handler = program.handler
        #: TorchScript, which runs eager: a ScriptModule cannot be exported to compile it
        self.scripted = version.format == "torchscript"
        self.reader = OutputReader(card.output, labels)
        #: the module's own float dtype (a model saved in float64 takes float64 batches)
        #: until `models.forward.prepare_forward` sets the worker's precision
        self.dtype = _float_dtype(program.module)
        self._synthetic = synthetic_data(card.input)
        #: the most items per batch its program takes (`Program.max_batch`); the worker's
        #: batches of this model stay within it (`serving.loader.model_settings`)
        self.program_max_batch = program.max_batch
        bounds = [n for n in (card.serving.max_batch, program.max_batch) if n is not None]
        #: the most items per batch it serves, where its card or program bounds them
        self.batch_limit = min(bounds) if bounds else None
        #: why its batches stay contiguous (None: channels-last may apply), as `check` found
        self.contiguous_only: str | None = None

    def settings(self) -> dict[str, Any]:
        """The worker settings this model sets for itself: its card's [serving] keys, and
        what its input allows (channels-last only for image batches; a handler runs eager,
        in the precision it chose; TorchScript runs eager)."""
        serving = self.card.serving
        given = {"max_batch": serving.max_batch, "compile": serving.compile,
                 "precision": serving.precision, "channels_last": serving.channels_last}
        if self.handler:
            given.update(compile="off", precision="fp32", channels_last="off")
        elif len(self.input_shape) != 3 or self.contiguous_only:
            given["channels_last"] = "off"
        if self.scripted:
            given["compile"] = "off"
        return {name: value for name, value in given.items() if value is not None}

    def synthetic_item(self) -> torch.Tensor:
        """A synthetic item of the card's input kind, preprocessed (`inputs.synthetic_data`)."""
        return self.preprocessor(self._synthetic)

    def to_inputs(self, batch: torch.Tensor) -> torch.Tensor:
        """A collated batch on the device; floats in the model's precision, image batches
        in its memory format (a handler's as they are)."""
        inputs = batch.to(self.device, non_blocking=batch.is_pinned())
        if self.handler:
            return inputs
        if inputs.is_floating_point():
            inputs = inputs.to(dtype=self.dtype)
        return inputs.contiguous(memory_format=self.memory_format) if inputs.dim() == 4 \
            else inputs

    def predict(self, batch: torch.Tensor, top_k: int) -> list[ItemOutput]:
        """Run the batch on the device under inference_mode; one answer per item."""
        with torch.inference_mode():
            return self.reader.read(self.forward(self.to_inputs(batch)), len(batch), top_k)

    def check(self) -> None:
        """RepositoryError unless synthetic batches of 1, 2 and more items (`check_sizes`,
        never more than the card's max_batch or the program takes) run and their output fits
        the card; a classifier without a labels file gets class_0, class_1, ... for its
        width. What the model's own code raises on the way is one line naming the stage (a
        handler's preprocess, the forward pass or a handler's predict, the reading of its
        output) and the batch's size."""
        item = self._checked_item()
        largest = self._check_sizes(item)
        if not self.handler:
            self.contiguous_only = self._channels_last_failure(collate([item] * largest))

    def _check_sizes(self, item: torch.Tensor, limit: int | None = None) -> int:
        """Synthetic batches of `item` run (`check_sizes`, none over `limit` either); the
        largest one's size."""
        bounds = [n for n in (self.batch_limit, limit) if n is not None]
        passed = 0
        for size in check_sizes(min(bounds) if bounds else None):
            self._check_batch(collate([item] * size), passed)
            passed = size
        return passed

    def check_prepared(self, precision: str, max_batch: int) -> None:
        """`check` again, through the forward pass the worker prepared (its precision,
        channels-last, compiled): RepositoryError where the model fails there, as one that
        its own dtype ran can in half precision. A worker never serves a model that fails
        every item. No batch is over the worker's `max_batch`: a compiled forward pass takes
        no more (`models.package_build`)."""
        try:
            self._check_sizes(self._checked_item(), max_batch)
        except RepositoryError as exc:
            hint = "; it passed in its own dtype: set [serving] precision = \"fp32\" in its " \
                "card" if precision != "fp32" else ""
            raise RepositoryError(self.file, f"in {precision}, the precision it would serve "
                                  f"in: {exc.reason}{hint}") from None

    def _channels_last_failure(self, batch: torch.Tensor) -> str | None:
        """Why the module fails a channels-last batch that passed contiguous (a `.view` of a
        convolution's output: `view size is not compatible with input tensor's size and
        stride`), None where it runs one or the batch is no image batch; the module is left
        contiguous. Channels-last only makes the forward pass faster: such a model serves
        contiguous."""
        if batch.dim() != 4:
            return None
        self.module.to(memory_format=torch.channels_last)
        try:
            inputs = self.to_inputs(batch).contiguous(memory_format=torch.channels_last)
            with torch.inference_mode():
                self._read_output(self.forward(inputs), len(batch))
        except Exception as exc:  # the model's own code raises anything
            log.info("model %s:%s serves contiguous batches: it fails on channels-last ones "
                     "(%s)", self.name, self.version, error_line(exc))
            return error_line(exc)
        finally:
            self.module.to(memory_format=torch.contiguous_format)
        return None

    def _check_batch(self, batch: torch.Tensor, passed: int) -> None:
        """One synthetic batch run and its output read; `passed`: the largest batch that
        did (0: none yet), which a card's max_batch could keep the model to."""
        size = len(batch)
        try:
            with torch.inference_mode():
                raw = self.forward(self.to_inputs(batch))
        except Exception as exc:  # the model's own code raises anything
            stage = "its predict fails" if self.handler else "fails"
            hint = (f"; a batch of {passed} passes: where the model takes no more, set "
                    f"[serving] max_batch = {passed} in its card") if passed else ""
            raise RepositoryError(self.file, f"{stage} on a synthetic batch of {size}: "
                                  f"{error_line(exc)}{hint}") from None
        try:
            with torch.inference_mode():
                self._read_output(raw, size)
        except OutputMismatchError as exc:
            said = str(exc) if f"a batch of {size}" in str(exc) else \
                f"{exc} (a synthetic batch of {size})"
            raise RepositoryError(self.file, said) from None
        except Exception as exc:  # torch's own, on an output of an odd dtype, layout, device
            log.debug("reading the output of %s failed", self.file, exc_info=True)
            raise RepositoryError(self.file, f"its output on a synthetic batch of {size} does "
                                  f"not read as a {self.card.output.kind} output: "
                                  f"{error_line(exc)}") from None

    def _checked_item(self) -> torch.Tensor:
        """The synthetic item, preprocessed; RepositoryError where the preprocess refuses it
        (a handler's failure is an ItemError too: `loaders.HandlerPreprocess`)."""
        try:
            return self.synthetic_item()
        except ItemError as exc:
            whose = "its preprocess" if self.handler else "the card's [input]"
            raise RepositoryError(self.file, (
                f"{whose} fails on the check's synthetic {self.card.input.kind} item "
                f"({synthetic_description(self.card.input)}): {exc.reason}")) from None

    def _read_output(self, raw: object, size: int) -> None:
        """A synthetic batch's output read as the card says (OutputMismatchError where it
        does not fit)."""
        if self.card.output.kind == "classification" and not self.labels:
            self.labels = class_labels(_width(raw, size, self.card.output.tensor))
            self.reader = OutputReader(self.card.output, self.labels, numbered=True)
        self.reader.read(raw, size, 1)


def _width(raw: object, size: int, choices: tuple[str | int, ...]) -> int:
    """The classes of a classifier's output for a batch of `size` (0 where it is not
    [batch, classes])."""
    outputs = named_outputs(raw, size, choices)
    values = outputs[0][1] if len(outputs) == 1 or choices else None
    return values.shape[1] if values is not None and values.dim() == 2 else 0


def _float_dtype(module: torch.nn.Module) -> torch.dtype:
    """The dtype of the module's first float parameter or buffer; float32 where it has none
    (a handler's weights are its own)."""
    tensors = [*module.parameters(), *module.buffers()]
    return next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
