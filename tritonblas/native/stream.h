// The driver's handle of a c10::Stream, where the running torch tells it.
//
// Why: c10::Stream::native_handle() came with torch 2.11; against torch 2.10's headers a direct call
// does not compile, and the whole C++ side would be lost there. Without it the handle is unknown
// (std::nullopt; the legacy default stream's handle is a null pointer, so null cannot say "unknown"),
// and callers leave the call to the Python side, which knows the stream.
#pragma once

#include <optional>

namespace tritonblas_native {

template <typename S>
auto stream_handle(const S& stream, int) -> decltype(stream.native_handle(), std::optional<void*>()) {
  return reinterpret_cast<void*>(stream.native_handle());
}

template <typename S>
std::optional<void*> stream_handle(const S&, long) {
  return std::nullopt;
}

// stream_handle(stream): the handle, or std::nullopt where the stream type does not give it.
template <typename S>
std::optional<void*> stream_handle(const S& stream) {
  return stream_handle(stream, 0);
}

}  // namespace tritonblas_native
