// Connect state that survives between non-blocking connect() calls.
//
// NCCL calls connect() again with the same 128-byte handle buffer until it returns a comm, so a
// transport parks a pointer to its per-attempt state in the handle's private half (bytes 64-127;
// the listener's public part is bytes 0-63). A registry of live states validates the pointer
// before it is followed: a stale, copied or garbage handle is never dereferenced, it simply
// starts a new attempt (whose parse of the public part then decides).
//
// `State::owner` names the transport that made it (eraseOwnedBy). `kGuard` tells the
// transports' states apart (a socket handle's state is never taken for an ib one).
// Thread-safety: the registry is locked; one state is driven by one caller at a time (NCCL
// connects a comm from one thread).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_set>

#include "common/thread_annotations.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin {

inline constexpr size_t kHandlePrivateOffset = 64;

template <typename State, uint64_t kGuard>
class HandleStates {
 public:
  // The live state parked in `handle`, or nullptr.
  static State* find(const uint8_t* handle) {
    uint64_t guard = 0;
    State* st = nullptr;
    std::memcpy(&guard, handle + kHandlePrivateOffset, 8);
    std::memcpy(&st, handle + kHandlePrivateOffset + 8, sizeof st);
    if (guard != kGuard || st == nullptr) return nullptr;
    MutexLock lock(mu_);
    return live_ != nullptr && live_->count(st) != 0 ? st : nullptr;
  }
  // Parks `st` (owned by the registry from now on) in `handle`.
  static void attach(uint8_t* handle, State* st) {
    {
      MutexLock lock(mu_);
      if (live_ == nullptr) live_ = new std::unordered_set<State*>();
      live_->insert(st);
    }
    const uint64_t guard = kGuard;
    std::memcpy(handle + kHandlePrivateOffset, &guard, 8);
    std::memcpy(handle + kHandlePrivateOffset + 8, &st, sizeof st);
  }
  // Forgets and deletes `st`, and clears the private half of `handle`.
  static void detach(uint8_t* handle, State* st) {
    {
      MutexLock lock(mu_);
      if (live_ != nullptr) {
        live_->erase(st);
        dropIfEmptyLocked();
      }
    }
    std::memset(handle + kHandlePrivateOffset, 0, kHandleBytes - kHandlePrivateOffset);
    delete st;
  }
  // Deletes every live state whose `owner` is `owner` (a transport being destroyed: attempts
  // NCCL abandoned must not keep its devices, QPs or sockets alive). The handles that still
  // point at them no longer find them: a later connect starts afresh.
  static void eraseOwnedBy(const void* owner) {
    MutexLock lock(mu_);
    if (live_ == nullptr) return;
    for (auto it = live_->begin(); it != live_->end();) {
      if ((*it)->owner == owner) {
        delete *it;
        it = live_->erase(it);
      } else {
        ++it;
      }
    }
    dropIfEmptyLocked();
  }

 private:
  // The set exists only while a state does. NCCL dlcloses the plugin after its last
  // communicator, and a process may dlopen it again (docs/plugin.md): a registry kept for the
  // process's life would be lost memory at every unload (LeakSanitizer: plugin_abi.lifecycle).
  // It is never destroyed by a static destructor either: at exit NCCL's threads may still
  // connect, and the set is left to them (reachable from live_, so not a leak).
  static void dropIfEmptyLocked() TQ_REQUIRES(mu_) {
    if (live_->empty()) {
      delete live_;
      live_ = nullptr;
    }
  }

  // Constant-initialised and trivially destructible: usable during exit and at dlclose.
  static_assert(std::is_trivially_destructible_v<Mutex>);
  static inline constinit Mutex mu_;
  static inline constinit std::unordered_set<State*>* live_ TQ_GUARDED_BY(mu_) = nullptr;
};

}  // namespace tq::plugin
