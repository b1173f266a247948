// Clang thread-safety annotations and the mutex they check (docs/development.md "Threads").
//
// libstdc++'s std::mutex carries no capability attribute, so a class that owns a mutex uses
// tq::Mutex and tq::MutexLock instead, marks each member the mutex protects TQ_GUARDED_BY(mu_) and
// each helper that expects it held TQ_REQUIRES(mu_). `clang++ -Wthread-safety` then proves, per
// translation unit, that every access holds the right lock; scripts/check-thread-safety.sh runs
// it over the whole tree with -Werror (CI). GCC builds see plain std::mutex underneath and
// empty macros: no cost, the same code.
//
// A condition variable waits on MutexLock::native() (a std::unique_lock of the std::mutex
// inside); a wait predicate that reads guarded members says so: `[this]() TQ_REQUIRES(mu_) {...}`.
#pragma once

#include <mutex>

#if defined(__clang__)
#define TQ_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TQ_THREAD_ANNOTATION(x)
#endif

#define TQ_CAPABILITY(x) TQ_THREAD_ANNOTATION(capability(x))
#define TQ_SCOPED_CAPABILITY TQ_THREAD_ANNOTATION(scoped_lockable)
#define TQ_GUARDED_BY(x) TQ_THREAD_ANNOTATION(guarded_by(x))
#define TQ_PT_GUARDED_BY(x) TQ_THREAD_ANNOTATION(pt_guarded_by(x))
#define TQ_ACQUIRED_BEFORE(...) TQ_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define TQ_ACQUIRED_AFTER(...) TQ_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define TQ_REQUIRES(...) TQ_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define TQ_ACQUIRE(...) TQ_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define TQ_RELEASE(...) TQ_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TQ_TRY_ACQUIRE(...) TQ_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define TQ_EXCLUDES(...) TQ_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define TQ_ASSERT_CAPABILITY(x) TQ_THREAD_ANNOTATION(assert_capability(x))
#define TQ_RETURN_CAPABILITY(x) TQ_THREAD_ANNOTATION(lock_returned(x))
// Only where the analysis cannot follow (say why next to it).
#define TQ_NO_THREAD_SAFETY_ANALYSIS TQ_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace tq {

// std::mutex with the capability attribute. Not recursive; not movable.
class TQ_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() TQ_ACQUIRE() { mu_.lock(); }
  void unlock() TQ_RELEASE() { mu_.unlock(); }
  bool try_lock() TQ_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds it (a callback documented to run under the lock).
  void assertHeld() const TQ_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::unique_lock's role): unlock() and lock() again in between,
// and native() for a std::condition_variable's wait.
class TQ_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) TQ_ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() TQ_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void lock() TQ_ACQUIRE() { lock_.lock(); }
  void unlock() TQ_RELEASE() { lock_.unlock(); }
  // The lock a std::condition_variable waits on (it is held again when the wait returns).
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// std::recursive_mutex with the capability attribute, for the rare lock a callback may take
// again on the same thread (gRPC running a reaction inline). The analysis is per function, so
// it never sees the re-entry; within one function it is an ordinary mutex.
class TQ_CAPABILITY("mutex") RecursiveMutex {
 public:
  RecursiveMutex() = default;
  RecursiveMutex(const RecursiveMutex&) = delete;
  RecursiveMutex& operator=(const RecursiveMutex&) = delete;
  void lock() TQ_ACQUIRE() { mu_.lock(); }
  void unlock() TQ_RELEASE() { mu_.unlock(); }

 private:
  std::recursive_mutex mu_;
};

class TQ_SCOPED_CAPABILITY RecursiveMutexLock {
 public:
  explicit RecursiveMutexLock(RecursiveMutex& mu) TQ_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~RecursiveMutexLock() TQ_RELEASE() { mu_.unlock(); }
  RecursiveMutexLock(const RecursiveMutexLock&) = delete;
  RecursiveMutexLock& operator=(const RecursiveMutexLock&) = delete;

 private:
  RecursiveMutex& mu_;
};

}  // namespace tq
