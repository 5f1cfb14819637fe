"""The packed little-endian wire arrays both sides' codecs share."""

from __future__ import annotations

import pytest

from protos.packing import pack_f32, pack_u32, unpack_f32, unpack_u32


def test_round_trips_and_little_endian():
    assert pack_u32([1, 2**32 - 1]) == b"\x01\x00\x00\x00\xff\xff\xff\xff"
    assert unpack_u32(pack_u32([0, 7, 2**31])) == [0, 7, 2**31]
    assert unpack_f32(pack_f32([0.5, -2.0])) == [0.5, -2.0]
    assert unpack_u32(b"") == []


@pytest.mark.parametrize(
    "bad,needle", [(b"\x00" * 5, "length 5"), ("abcd", "got str"), (None, "NoneType")]
)
def test_bad_input_says_what_is_wrong(bad, needle):
    for unpack in (unpack_u32, unpack_f32):
        with pytest.raises(ValueError, match=needle):
            unpack(bad)
