// Internal: Python pickles made readable by LibTorch's unpickler. It reads a
// collections.OrderedDict (what Python's model.state_dict() returns) as None, so Python's
// checkpoints fail in torch::pickle_load (pytorch/pytorch#36577, #37213, #100741).
#pragma once

#include <string>

namespace mixprec::detail {

// Note [Python's OrderedDicts in LibTorch's unpickler]
// Python pickles an OrderedDict as `GLOBAL collections.OrderedDict, EMPTY_TUPLE, REDUCE`, then
// its items (SETITEMS) and, for a state_dict, its `_metadata` attribute (a state, then BUILD).
// LibTorch's unpickler maps that GLOBAL to a function returning None (OrderedDicts only occur
// there as a tensor's empty backward hooks), so the SETITEMS that follow fail ("Expected
// GenericDict but got None"). plain_dicts() rewrites the opcode stream, not the values: each
// `OrderedDict()` becomes EMPTY_DICT; the BUILD that would set its attributes (`_metadata`: module
// versions) becomes a SETITEMS under kDroppedStateKey (LibTorch's unpickler has no POP), which
// the caller removes from the result; FRAME hints are dropped since lengths change. SETITEM (a
// dict of one item) becomes MARK ... SETITEMS and APPEND MARK ... APPENDS, since LibTorch
// 1.13's unpickler lacks both. Every other opcode is copied as it is, so the unpickler sees exactly
// the dicts Python saw, in their order. The walk tracks the stack to know which value a BUILD
// applies to; an OrderedDict built any other way is refused rather than misread.

/// The key under which plain_dicts() files an OrderedDict's attributes (no Python code makes a
/// key that starts with a NUL).
inline const std::string kDroppedStateKey = std::string(1, '\0') + "mixprec: attributes";

/// `pickle` with every collections.OrderedDict turned into a plain dict (see the note). Throws
/// c10::Error for a truncated stream, an unknown opcode or an OrderedDict built in another way.
std::string plain_dicts(const std::string& pickle);

}  // namespace mixprec::detail
