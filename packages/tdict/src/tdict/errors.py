"""Exception classes shared by tdict's raise sites.

Where two exception types are both a fair contract for one error (a shape mismatch is a
``RuntimeError`` to torch and a ``ValueError`` to most Python code), tdict raises a class that
subclasses both, as numpy's ``AxisError`` subclasses ``ValueError`` and ``IndexError``: code
written against either contract catches it. Each class here is defined once and reused by every
raise site of its kind.

Examples:
    >>> import torch
    >>> from tdict import TensorDict
    >>> from tdict.errors import ShapeMismatchError
    >>> td = TensorDict({"a": torch.zeros(3, 4)}, batch_size=[3])
    >>> try:
    ...     td.batch_size = [4]
    ... except ValueError as err:  # a RuntimeError too
    ...     isinstance(err, (ShapeMismatchError, RuntimeError))
    True
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = [
    "ArgumentTypeError",
    "BatchIndexError",
    "DimError",
    "InvalidArgumentError",
    "KeyValueError",
    "LOCKED",
    "ShapeMismatchError",
    "SymlinkError",
    "batch_mismatch_error",
    "incompatible_leaf",
    "incompatible_leaf_of",
    "locked_error",
]

LOCKED = "Cannot modify locked TensorDict"
"""How every lock refusal starts, whatever the collection (a fixed phrase code may search for)."""


class ShapeMismatchError(RuntimeError, ValueError):
    """A value's shape or batch size does not fit the collection it is written into.

    torch reports shape errors as ``RuntimeError``; Python code usually expects ``ValueError`` for a
    bad argument. Both catch this.

    Examples:
        >>> issubclass(ShapeMismatchError, RuntimeError) and issubclass(ShapeMismatchError, ValueError)
        True
    """


class DimError(IndexError, ValueError):
    """A batch dim out of range (numpy's ``AxisError`` has the same two bases).

    torch reports a dim out of range as ``IndexError``; a bad argument value is a ``ValueError``.

    Examples:
        >>> issubclass(DimError, IndexError) and issubclass(DimError, ValueError)
        True
    """


class InvalidArgumentError(RuntimeError, ValueError):
    """An argument value (or a combination of arguments) an operation cannot use, where torch
    raises ``RuntimeError`` (repeated dims, say) and Python code expects ``ValueError``.

    Examples:
        >>> issubclass(InvalidArgumentError, RuntimeError) and issubclass(InvalidArgumentError, ValueError)
        True
    """


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type where the peer library raises ``ValueError``: a ``TypeError``
    (the better contract) that code catching ``ValueError`` also catches.

    Examples:
        >>> issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)
        True
    """


class BatchIndexError(IndexError, RuntimeError):
    """An index the batch dims cannot take (indexing a collection that has no batch dim): an
    ``IndexError`` as for a 0-dim tensor, and the ``RuntimeError`` tensordict raises.

    Examples:
        >>> issubclass(BatchIndexError, IndexError) and issubclass(BatchIndexError, RuntimeError)
        True
    """


class KeyValueError(KeyError, ValueError):
    """A key that cannot be used as asked: it names a leaf where a sub-collection is needed, or a
    key already taken.

    A ``KeyError`` (it is about a key) and a ``ValueError`` (the key is well formed, its target is
    not what the operation needs). ``str()`` gives the message itself, not its ``repr`` as a plain
    ``KeyError`` does.

    Examples:
        >>> err = KeyValueError("key 'a' is a leaf")
        >>> isinstance(err, KeyError) and isinstance(err, ValueError), str(err)
        (True, "key 'a' is a leaf")
    """

    def __str__(self) -> str:
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class SymlinkError(FileExistsError, RuntimeError):
    """A symbolic link found where a file or directory was to be written: tdict never writes
    through one (its target may be anywhere).

    A ``FileExistsError`` (something already sits at the path) and a ``RuntimeError`` (what
    tensordict raises there).

    Examples:
        >>> issubclass(SymlinkError, FileExistsError) and issubclass(SymlinkError, RuntimeError)
        True
    """


def locked_error(detail: str) -> RuntimeError:
    """The error for a write refused because the collection is locked.

    Args:
        detail: what was refused and how to proceed, appended after the fixed phrase.

    Examples:
        >>> str(locked_error("cannot delete key 'a'; unlock_() it first."))
        "Cannot modify locked TensorDict: cannot delete key 'a'; unlock_() it first."
    """
    return RuntimeError(f"{LOCKED}: {detail}")


def incompatible_leaf(key: Any, shape: Sequence[int], batch_size: Sequence[int]) -> str:
    """Says that the leaf ``key`` of ``shape`` cannot live under ``batch_size`` (a fixed wording).

    Examples:
        >>> incompatible_leaf("a", [3, 4], [4])
        'the Tensor a has shape torch.Size([3, 4]) which is incompatible with the batch-size torch.Size([4])'
    """
    name = key if isinstance(key, str) else repr(key)
    return (
        f"the Tensor {name} has shape {torch.Size(shape)} which is incompatible with the batch-size "
        f"{torch.Size(batch_size)}"
    )


def batch_mismatch_error(key: Any, value: Any, batch_size: Sequence[int], where: str = "") -> ShapeMismatchError:
    """The error for writing ``value`` under ``key`` when its leading dims are not ``batch_size``.

    Args:
        key: the key written.
        value: a tensor or a tensor collection.
        batch_size: the batch size of the destination.
        where: appended to "the batch size [...]" to name the destination (``" of the lazy stack"``).

    For a collection, the message also names its first leaf whose shape does not start with
    ``batch_size`` (the reason its batch size cannot simply be extended).

    Examples:
        >>> err = batch_mismatch_error("a", torch.zeros(3), [2])
        >>> isinstance(err, RuntimeError) and isinstance(err, ValueError)
        True
        >>> for part in str(err).split(": "):
        ...     print(part)
        Key 'a'
        batch dimension mismatch, got self.batch_size=torch.Size([2]) and value.shape=torch.Size([3])
        the value of shape [3] does not start with the batch size [2].
    """
    bs = list(batch_size)
    if isinstance(value, torch.Tensor):
        return ShapeMismatchError(
            f"Key {key!r}: batch dimension mismatch, got self.batch_size={torch.Size(bs)} and "
            f"value.shape={value.shape}: the value of shape {list(value.shape)} does not start with the batch "
            f"size {bs}{where}."
        )
    return ShapeMismatchError(
        f"Key {key!r}: batch dimension mismatch, nested collection of batch size {list(value.batch_size)} does "
        f"not start with the batch size {bs}{where}{incompatible_leaf_of(value, bs)}."
    )


def incompatible_leaf_of(value: Any, batch_size: Sequence[int]) -> str:
    """``" (the Tensor ... is incompatible ...)"`` for the first tensor leaf of the collection ``value``
    that does not start with ``batch_size``, or ``""`` when there is none."""
    bs = list(batch_size)
    n = len(bs)
    try:
        for leaf_key, leaf in value.items(True, True):
            if isinstance(leaf, torch.Tensor) and list(leaf.shape[:n]) != bs:
                return f" ({incompatible_leaf(leaf_key, leaf.shape, bs)})"
    except (RuntimeError, KeyError):  # a ragged lazy stack: the message goes without the detail
        pass
    return ""
