"""A tagged, bounded encoding of plain Python data, for values that cross a process boundary of the sandbox.

Standard library only: the harness loads this file by path inside the sandbox, and the library imports it in
the caller. Used for a functional test's return value (the program's process -> the caller) and for the calls
an assert test makes (the grader's process <-> the program's process).

The text is JSON. JSON's own values carry ``None``, ``bool``, ``float`` (with ``NaN``/``Infinity``), ``str``,
``list`` and small ``int``; every other value is a one-key object whose key is a tag, so that the types that
JSON would merge stay apart: ``tuple`` (``t``), ``set`` (``s``), ``frozenset`` (``fs``), ``dict`` (``d``,
a list of key/value pairs, so keys keep their type), ``collections.Counter`` (``C``), ``OrderedDict``
(``o``), ``deque`` (``Q``), big ``int`` (``i``, hexadecimal: no decimal-digit limit applies), ``Fraction``
(``q``), ``Decimal`` (``m``), ``complex`` (``c``), ``bytes`` (``b``), ``bytearray`` (``ba``), ``range``
(``r``), an exhausted iterator or generator (``g``), and a value nested too deep to send (``!``).

Decoding builds only these builtin and standard-library types from their data: it never imports, looks up
or calls anything the text names, and refuses text over ``max_bytes`` or nested deeper than
:data:`MAX_DEPTH` with :class:`WireError`. (Hashing a decoded ``Decimal('sNaN')`` or comparing it raises, as
in Python; callers that compare catch every exception.)

>>> decode(encode({(1, 2): {3}, "x": [1.5, None]}))
{(1, 2): {3}, 'x': [1.5, None]}
"""

import collections
import decimal
import fractions
import json

MAX_DEPTH = 100  # deeper values are sent as a marker that decodes to an error (no recursion in the reader)
_ITERATORS = ("generator", "map", "filter", "zip", "enumerate", "reversed")  # sent as their items
_SMALL_INT = 1 << 53  # ints beyond this travel as hexadecimal text (exact, and free of int_max_str_digits)


class WireError(ValueError):
    """The text is not a value this encoding carries, is too large, or is too deeply nested."""


class _TooDeep(Exception):
    pass


def _int(value):
    if -_SMALL_INT < value < _SMALL_INT:
        return value
    return {"i": format(value, "x")}  # '-1f' for negative values


def _pairs(items, depth):
    return [[_to_tree(key, depth), _to_tree(item, depth)] for key, item in items]


def _to_tree(value, depth):
    if depth > MAX_DEPTH:
        raise _TooDeep
    depth += 1
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return _int(value)
    if kind is list:
        return [_to_tree(item, depth) for item in value]
    if kind is tuple:
        return {"t": [_to_tree(item, depth) for item in value]}
    if kind is dict:
        return {"d": _pairs(value.items(), depth)}
    if kind is set:
        return {"s": [_to_tree(item, depth) for item in value]}
    if kind is frozenset:
        return {"fs": [_to_tree(item, depth) for item in value]}
    if kind is collections.Counter:
        return {"C": _pairs(dict.items(value), depth)}
    if kind is collections.OrderedDict:
        return {"o": _pairs(value.items(), depth)}
    if kind is collections.defaultdict:
        return {"d": _pairs(dict.items(value), depth)}  # equal to the dict it holds
    if kind is collections.deque:
        return {"Q": [_to_tree(item, depth) for item in value]}
    if kind is fractions.Fraction:
        return {"q": [_int(value.numerator), _int(value.denominator)]}
    if kind is decimal.Decimal:
        return {"m": str(value)}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is bytearray:
        return {"ba": bytes(value).hex()}
    if kind is range:
        return {"r": [_int(value.start), _int(value.stop), _int(value.step)]}
    # Subclasses travel as the builtin value they hold (what they claim about equality stays behind).
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return _int(int.__int__(value))
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [_to_tree(item, depth) for item in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [_to_tree(item, depth) for item in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"d": _pairs(dict.items(value), depth)}
    if kind.__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return _to_tree(value.item(), depth - 1)  # a numpy scalar: its Python value
    if kind.__name__ in _ITERATORS or kind.__name__.endswith("iterator"):
        return {"g": [_to_tree(item, depth) for item in value]}
    raise TypeError(
        f"a {kind.__name__} cannot be sent: only plain data (numbers, text, bytes, lists, tuples, dicts, sets, "
        "Fraction, Decimal, complex, ...) crosses the sandbox"
    )


def encode(value, max_bytes=None):
    """``value`` as tagged JSON text. Raises ``TypeError`` for a value that is not plain data, and
    :class:`WireError` when the text would exceed ``max_bytes``. A value nested deeper than
    :data:`MAX_DEPTH` is encoded as a marker that :func:`decode` refuses."""
    try:
        tree = _to_tree(value, 0)
    except _TooDeep:
        tree = {"!": f"nested deeper than {MAX_DEPTH} levels"}
    except RecursionError:
        tree = {"!": "nested deeper than the recursion limit"}
    text = json.dumps(tree, separators=(",", ":"))
    if max_bytes is not None and len(text) > max_bytes:
        raise WireError(f"the value takes {len(text)} bytes, over the limit of {max_bytes}")
    return text


def _hex_int(payload):
    if type(payload) is int:
        return payload
    if type(payload) is not dict or len(payload) != 1 or type(payload.get("i")) is not str:
        raise WireError("expected an integer")
    return int(payload["i"], 16)


def _items(payload, depth):
    if type(payload) is not list:
        raise WireError("expected a list")
    return [_from_tree(item, depth) for item in payload]


def _decoded_pairs(payload, depth):
    if type(payload) is not list or not all(type(pair) is list and len(pair) == 2 for pair in payload):
        raise WireError("expected key/value pairs")
    return [(_from_tree(key, depth), _from_tree(item, depth)) for key, item in payload]


def _from_tree(tree, depth):
    if depth > MAX_DEPTH + 1:
        raise WireError(f"nested deeper than {MAX_DEPTH} levels")
    depth += 1
    kind = type(tree)
    if tree is None or kind is bool or kind is str or kind is float or kind is int:
        return tree
    if kind is list:
        return [_from_tree(item, depth) for item in tree]
    if kind is not dict or len(tree) != 1:
        raise WireError("malformed value")
    ((tag, payload),) = tree.items()
    if tag == "t":
        return tuple(_items(payload, depth))
    if tag == "d":
        return dict(_decoded_pairs(payload, depth))
    if tag == "s":
        return set(_items(payload, depth))
    if tag == "fs":
        return frozenset(_items(payload, depth))
    if tag == "i":
        return _hex_int(tree)
    if tag == "C":
        return collections.Counter(dict(_decoded_pairs(payload, depth)))
    if tag == "o":
        return collections.OrderedDict(_decoded_pairs(payload, depth))
    if tag == "Q":
        return collections.deque(_items(payload, depth))
    if tag == "q":
        if type(payload) is not list or len(payload) != 2:
            raise WireError("malformed Fraction")
        return fractions.Fraction(_hex_int(payload[0]), _hex_int(payload[1]))
    if tag == "m":
        if type(payload) is not str:
            raise WireError("malformed Decimal")
        return decimal.Decimal(payload)
    if tag == "c":
        if type(payload) is not list or len(payload) != 2 or not all(type(part) is float for part in payload):
            raise WireError("malformed complex")
        return complex(payload[0], payload[1])
    if tag in ("b", "ba"):
        if type(payload) is not str:
            raise WireError("malformed bytes")
        return bytes.fromhex(payload) if tag == "b" else bytearray.fromhex(payload)
    if tag == "r":
        if type(payload) is not list or len(payload) != 3:
            raise WireError("malformed range")
        return range(*(_hex_int(part) for part in payload))
    if tag == "g":
        return iter(_items(payload, depth))
    if tag == "!":
        raise WireError(f"the value could not be sent: {str(payload)[:200]}")
    raise WireError(f"unknown tag {str(tag)[:20]!r}")


def decode(text, max_bytes=None):
    """The value :func:`encode` wrote. Raises :class:`WireError` (or ``ValueError``/``RecursionError`` from
    malformed JSON, ``TypeError`` for an unhashable set element or key) for anything else; never executes code
    named by the text."""
    if max_bytes is not None and len(text) > max_bytes:
        raise WireError(f"the value takes {len(text)} bytes, over the limit of {max_bytes}")
    return _from_tree(json.loads(text), 0)
