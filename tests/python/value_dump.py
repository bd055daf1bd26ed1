"""The text of a loaded value, as tests/value_dump.h writes it for mixprec's loads: the tests
compare what torch.load returns with what mixprec::pickle_load returns, as text. Storages are
numbered in order of first appearance, so that sharing is compared too."""
import struct

C10_NAMES = {  # c10's names of the dtypes whose Python name value_dump.h does not write
    "float8_e5m2": "Float8_e5m2", "float8_e4m3fn": "Float8_e4m3fn",
    "float8_e5m2fnuz": "Float8_e5m2fnuz", "float8_e4m3fnuz": "Float8_e4m3fnuz",
    "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64",
    "float8_e8m0fnu": "Float8_e8m0fnu", "float4_e2m1fn_x2": "Float4_e2m1fn_x2",
}


def _list(values):
    return "[" + ", ".join(str(v) for v in values) + "]"


class ValueDump:
    def __init__(self, torch):
        self.torch = torch
        self.storages = {}

    def __call__(self, value):
        out = []
        self._write(value, out)
        return "".join(out)

    def _write(self, v, out):
        torch = self.torch
        if v is None:
            out.append("None")
        elif isinstance(v, bool):
            out.append("True" if v else "False")
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append("f%x" % struct.unpack("<Q", struct.pack("<d", v))[0])
        elif isinstance(v, str):
            out.append("s%d:%s" % (len(v.encode("utf-8", "surrogatepass")), v))
        elif isinstance(v, tuple):
            out.append("(")
            for e in v:
                self._write(e, out)
                out.append(",")
            out.append(")")
        elif isinstance(v, list):
            out.append("[")
            for e in v:
                self._write(e, out)
                out.append(",")
            out.append("]")
        elif isinstance(v, dict):
            out.append("{")
            for k, e in v.items():
                self._write(k, out)
                out.append(":")
                self._write(e, out)
                out.append(",")
            out.append("}")
        elif isinstance(v, torch.Tensor):
            name = str(v.dtype).replace("torch.", "")
            name = C10_NAMES.get(name, name)
            ptr = v.untyped_storage().data_ptr()
            index = self.storages.setdefault(ptr, len(self.storages))
            data = v.detach().contiguous().reshape(-1)
            hexdata = data.view(torch.uint8).numpy().tobytes().hex() if data.numel() > 0 else ""
            out.append("T%s|%s|%s|%d|st%d|rg%d|%s" % (
                name, _list(v.shape), _list(v.stride()), v.storage_offset(), index,
                int(v.requires_grad), hexdata))
        else:
            out.append("<%s>" % type(v).__name__)
