// Named shared-memory regions (POSIX shm_open + mmap) handed to JavaScript as
// SharedArrayBuffers, so that limiter code in unrelated processes decides on the same words
// with Atomics. Node-API wherever it can; a SharedArrayBuffer over external memory needs
// V8's SharedArrayBuffer::NewBackingStore on Node versions whose Node-API lacks
// node_api_create_external_sharedarraybuffer (this is why a build serves one Node major).
//
// Exports:
//   open(name, bytes, initialBytes, mode) -> { created, buffer, size } | null (not sized yet)
//   view(buffer, offset, length)          -> a SharedArrayBuffer over part of a mapping
//   commit(buffer, offset, length)        -> allocates pages (ENOSPC as an error, not SIGBUS)
//   unlink(name)                          -> true, or false when there was no such region
//   alive(pid)                            -> whether a process with that id exists
//   wake(buffer, byteOffset)              -> FUTEX_WAKE (shared: other processes too)
//   wait(buffer, byteOffset, value, timeoutMs, callback)
//                                         -> calls callback('ok' | 'timed-out' | 'not-equal')
//                                            once the word is woken, differs, or time is up
//
// Waiting: one native thread per process sleeps in futex_waitv on every word JavaScript
// waits on (no FUTEX_PRIVATE_FLAG: the words are in shared mappings, and a FUTEX_WAKE from
// another process reaches them), and hands each outcome to its JavaScript thread through
// a thread-safe function.

#include <node_api.h>
#include <v8.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include <climits>
#include <condition_variable>
#include <ctime>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

// One mapping, shared by every buffer made over it; unmapped when the last one is collected.
struct Mapping {
  void* base;
  size_t size;
  int fd;
  std::atomic<int> refs;
};

void forget(Mapping* m);

void release(Mapping* m) {
  if (m->refs.fetch_sub(1) == 1) {
    forget(m);
    munmap(m->base, m->size);
    close(m->fd);
    delete m;
  }
}

// Each buffer keeps its mapping alive; the hint is the Mapping.
void deleteBacking(void* data, size_t length, void* hint) {
  release(static_cast<Mapping*>(hint));
}

// Throws an Error whose code is the errno's name; the JavaScript side adds what it was doing.
napi_value throwErrno(napi_env env, const char* what, int err, const std::string& name) {
  std::string msg = std::string(what) + " \"" + name + "\": " + strerror(err);
  const char* code = err == ENOSPC         ? "ENOSPC"
                     : err == EACCES       ? "EACCES"
                     : err == EPERM        ? "EPERM"
                     : err == ENOENT       ? "ENOENT"
                     : err == EEXIST       ? "EEXIST"
                     : err == ENAMETOOLONG ? "ENAMETOOLONG"
                     : err == ENOMEM       ? "ENOMEM"
                     : err == EFBIG        ? "EFBIG"
                     : err == EMFILE       ? "EMFILE"
                     : err == ENFILE       ? "ENFILE"
                     : err == EINVAL       ? "EINVAL"
                                           : "EIO";
  napi_throw_error(env, code, msg.c_str());
  return nullptr;
}

// Registry of mappings by the address their buffers start at, so view()/commit() find the
// mapping of a buffer made here: a few entries per region a process has open, as many as
// it keeps open (a fixed table would refuse the buffers of regions opened past its size).
struct Entry {
  Mapping* m;
  size_t offset;
};
std::unordered_map<void*, Entry> entries;
// Worker threads of one process share this table (and may collect buffers on any thread).
std::mutex entriesLock;

void forget(Mapping* m) {
  std::lock_guard<std::mutex> hold(entriesLock);
  for (auto it = entries.begin(); it != entries.end();) {
    if (it->second.m == m) {
      it = entries.erase(it);
    } else {
      ++it;
    }
  }
}

napi_value makeBuffer(napi_env env, Mapping* m, size_t offset, size_t length) {
  m->refs.fetch_add(1);
  char* data = static_cast<char*>(m->base) + offset;
  napi_value result = nullptr;
#if defined(NODE_API_EXPERIMENTAL_HAS_CREATE_EXTERNAL_SHAREDARRAYBUFFER)
  if (node_api_create_external_sharedarraybuffer(
          env, data, length, [](void* d, void* hint) { release(static_cast<Mapping*>(hint)); },
          m, &result) != napi_ok) {
    release(m);
    return nullptr;
  }
#else
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  std::shared_ptr<v8::BackingStore> store =
      v8::SharedArrayBuffer::NewBackingStore(data, length, deleteBacking, m);
  v8::Local<v8::SharedArrayBuffer> sab = v8::SharedArrayBuffer::New(isolate, std::move(store));
  // A napi_value is a v8::Local's slot (how Node-API itself converts them).
  v8::Local<v8::Value> value = sab;
  static_assert(sizeof(value) == sizeof(napi_value), "napi_value is a Local");
  std::memcpy(static_cast<void*>(&result), &value, sizeof(value));
#endif
  std::lock_guard<std::mutex> hold(entriesLock);
  entries.emplace(data, Entry{m, offset});
  return result;
}

Mapping* mappingOf(napi_env env, napi_value buffer, size_t* offset, size_t* length) {
  // Node 20's napi_get_arraybuffer_info does not read a SharedArrayBuffer: V8 does.
  v8::Local<v8::Value> value;
  std::memcpy(static_cast<void*>(&value), &buffer, sizeof(value));
  if (value.IsEmpty() || !value->IsSharedArrayBuffer()) {
    napi_throw_type_error(env, nullptr, "atomic-limiter/host: expected a region's buffer");
    return nullptr;
  }
  std::shared_ptr<v8::BackingStore> store = value.As<v8::SharedArrayBuffer>()->GetBackingStore();
  void* data = store->Data();
  size_t len = store->ByteLength();
  std::lock_guard<std::mutex> hold(entriesLock);
  auto it = entries.find(data);
  if (it != entries.end()) {
    *offset = it->second.offset;
    *length = len;
    return it->second.m;
  }
  napi_throw_type_error(env, nullptr, "atomic-limiter/host: the buffer is not a region's");
  return nullptr;
}

bool getString(napi_env env, napi_value v, std::string* out) {
  char buf[512];
  size_t n = 0;
  if (napi_get_value_string_utf8(env, v, buf, sizeof buf, &n) != napi_ok) return false;
  out->assign(buf, n);
  return true;
}

double getNumber(napi_env env, napi_value v) {
  double d = 0;
  napi_get_value_double(env, v, &d);
  return d;
}

napi_value Open(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  std::string name;
  if (argc < 4 || !getString(env, argv[0], &name)) {
    napi_throw_type_error(env, nullptr, "atomic-limiter/host: open(name, bytes, initial, mode)");
    return nullptr;
  }
  size_t bytes = static_cast<size_t>(getNumber(env, argv[1]));
  size_t initial = static_cast<size_t>(getNumber(env, argv[2]));
  mode_t mode = static_cast<mode_t>(getNumber(env, argv[3]));
  std::string path = "/" + name;

  bool created = true;
  // The umask must not widen or narrow the mode asked for: fchmod below sets it exactly.
  int fd = shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = shm_open(path.c_str(), O_RDWR, 0);
    // Unlinked between the two calls: the caller tries again.
    if (fd < 0 && errno == ENOENT) {
      napi_value null;
      napi_get_null(env, &null);
      return null;
    }
  }
  if (fd < 0) return throwErrno(env, "shm_open", errno, name);
  size_t size = bytes;
  if (created) {
    int err = 0;
    if (fchmod(fd, mode) != 0) {
      err = errno;
    } else if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      err = errno;
    } else if (initial > 0) {
      // Allocate what is written at once: a full /dev/shm is an error here, not a SIGBUS
      // on the first write.
      err = posix_fallocate(fd, 0, static_cast<off_t>(initial));
    }
    if (err != 0) {
      close(fd);
      shm_unlink(path.c_str());
      return throwErrno(env, "creating", err, name);
    }
  } else {
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      return throwErrno(env, "fstat", err, name);
    }
    if (st.st_size == 0) {
      // Its creator has not sized it yet: the caller waits and tries again.
      close(fd);
      napi_value null;
      napi_get_null(env, &null);
      return null;
    }
    size = static_cast<size_t>(st.st_size);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    if (created) shm_unlink(path.c_str());
    return throwErrno(env, "mmap", err, name);
  }
  Mapping* m = new Mapping{base, size, fd, {1}};
  napi_value buffer = makeBuffer(env, m, 0, size);
  release(m);  // the buffer holds it now
  if (buffer == nullptr) return nullptr;
  napi_value result, createdValue, sizeValue;
  napi_create_object(env, &result);
  napi_get_boolean(env, created, &createdValue);
  napi_create_double(env, static_cast<double>(size), &sizeValue);
  napi_set_named_property(env, result, "created", createdValue);
  napi_set_named_property(env, result, "buffer", buffer);
  napi_set_named_property(env, result, "size", sizeValue);
  return result;
}

napi_value View(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  size_t base = 0, length = 0;
  Mapping* m = mappingOf(env, argv[0], &base, &length);
  if (m == nullptr) return nullptr;
  size_t offset = static_cast<size_t>(getNumber(env, argv[1]));
  size_t len = static_cast<size_t>(getNumber(env, argv[2]));
  if (base + offset + len > m->size) {
    napi_throw_range_error(env, nullptr, "atomic-limiter/host: a view past the region's end");
    return nullptr;
  }
  return makeBuffer(env, m, base + offset, len);
}

napi_value Commit(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  size_t base = 0, length = 0;
  Mapping* m = mappingOf(env, argv[0], &base, &length);
  if (m == nullptr) return nullptr;
  size_t offset = static_cast<size_t>(getNumber(env, argv[1]));
  size_t len = static_cast<size_t>(getNumber(env, argv[2]));
  int err = posix_fallocate(m->fd, static_cast<off_t>(base + offset), static_cast<off_t>(len));
  if (err != 0) return throwErrno(env, "fallocate", err, "(region)");
  return nullptr;
}

napi_value Unlink(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  std::string name;
  if (argc < 1 || !getString(env, argv[0], &name)) {
    napi_throw_type_error(env, nullptr, "atomic-limiter/host: unlink(name)");
    return nullptr;
  }
  std::string path = "/" + name;
  napi_value result;
  if (shm_unlink(path.c_str()) == 0) {
    napi_get_boolean(env, true, &result);
    return result;
  }
  if (errno == ENOENT) {
    napi_get_boolean(env, false, &result);
    return result;
  }
  return throwErrno(env, "shm_unlink", errno, name);
}

napi_value Alive(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  int pid = static_cast<int>(getNumber(env, argv[0]));
  bool alive = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
  napi_value result;
  napi_get_boolean(env, alive, &result);
  return result;
}

// ---- waiting ---------------------------------------------------------------------------

#ifndef __NR_futex_waitv
#define __NR_futex_waitv 449
#endif

struct Env;

struct Wait {
  uint64_t id;
  uint32_t* addr;
  uint32_t value;
  int64_t deadlineNs;  // CLOCK_MONOTONIC; INT64_MAX for none
  Env* env;
  Mapping* m;  // kept mapped while waited on
};

// Per JavaScript thread (main or worker): the function that settles its waits.
struct Env {
  napi_threadsafe_function tsfn;
  bool closing;
};

struct Outcome {
  uint64_t id;
  const char* result;
};

std::mutex waitLock;
std::vector<Wait> waits;
uint64_t nextWaitId = 1;
std::atomic<uint32_t> control{0};  // bumped to make the thread re-read `waits`
bool threadStarted = false;

int64_t nowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void finish(const Wait& w, const char* result) {
  if (!w.env->closing) {
    napi_call_threadsafe_function(w.env->tsfn, new Outcome{w.id, result}, napi_tsfn_nonblocking);
  }
  release(w.m);
}

void waiterThread() {
  std::vector<struct futex_waitv> vec;
  std::vector<uint64_t> ids;
  bool haveWaitv = true;
  for (;;) {
    uint32_t seenControl = control.load();
    int64_t deadline = INT64_MAX;
    vec.clear();
    ids.clear();
    {
      std::lock_guard<std::mutex> hold(waitLock);
      int64_t now = nowNs();
      // Settle what is already settled: a changed word, a passed deadline.
      for (size_t i = 0; i < waits.size();) {
        Wait& w = waits[i];
        const char* result = nullptr;
        if (__atomic_load_n(w.addr, __ATOMIC_SEQ_CST) != w.value) {
          result = "ok";
        } else if (w.deadlineNs <= now) {
          result = "timed-out";
        }
        if (result != nullptr) {
          finish(w, result);
          waits[i] = waits.back();
          waits.pop_back();
          continue;
        }
        if (w.deadlineNs < deadline) deadline = w.deadlineNs;
        if (vec.size() < FUTEX_WAITV_MAX - 1) {
          vec.push_back({w.value, reinterpret_cast<uint64_t>(w.addr), FUTEX_32, 0});
          ids.push_back(w.id);
        }
        i++;
      }
      // More waits than one futex_waitv takes: the others are looked at every millisecond.
      if (waits.size() > vec.size() && deadline > now + 1000000) deadline = now + 1000000;
    }
    vec.push_back({seenControl, reinterpret_cast<uint64_t>(&control), FUTEX_32 | FUTEX_PRIVATE_FLAG, 0});
    struct timespec ts;
    struct timespec* timeout = nullptr;
    if (deadline != INT64_MAX) {
      ts.tv_sec = deadline / 1000000000;
      ts.tv_nsec = deadline % 1000000000;
      timeout = &ts;
    }
    long r = -1;
    if (haveWaitv) {
      r = syscall(__NR_futex_waitv, vec.data(), vec.size(), 0, timeout, CLOCK_MONOTONIC);
      if (r < 0 && errno == ENOSYS) haveWaitv = false;
    }
    if (!haveWaitv) {
      // A kernel before 5.16: look at the words every millisecond instead.
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, nullptr);
      continue;
    }
    if (r >= 0 && static_cast<size_t>(r) < ids.size()) {
      // Woken on a word whose value may be unchanged (a wake without a change): settle it.
      std::lock_guard<std::mutex> hold(waitLock);
      for (size_t i = 0; i < waits.size(); i++) {
        if (waits[i].id == ids[r]) {
          finish(waits[i], "ok");
          waits[i] = waits.back();
          waits.pop_back();
          break;
        }
      }
    }
  }
}

void poke() {
  control.fetch_add(1);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&control), FUTEX_WAKE_PRIVATE, 1, nullptr,
          nullptr, 0);
}

// Runs on the JavaScript thread: callbacks[id](result).
void callJs(napi_env env, napi_value js, void* context, void* data) {
  Outcome* o = static_cast<Outcome*>(data);
  if (env != nullptr && js != nullptr) {
    napi_value argv[2];
    napi_create_double(env, static_cast<double>(o->id), &argv[0]);
    napi_create_string_utf8(env, o->result, NAPI_AUTO_LENGTH, &argv[1]);
    napi_value global;
    napi_get_global(env, &global);
    napi_call_function(env, global, js, 2, argv, nullptr);
  }
  delete o;
}

void envCleanup(void* arg) {
  Env* e = static_cast<Env*>(arg);
  {
    std::lock_guard<std::mutex> hold(waitLock);
    e->closing = true;
    for (size_t i = 0; i < waits.size();) {
      if (waits[i].env == e) {
        release(waits[i].m);
        waits[i] = waits.back();
        waits.pop_back();
        continue;
      }
      i++;
    }
  }
  napi_release_threadsafe_function(e->tsfn, napi_tsfn_abort);
}

// setSettler(fn): this JavaScript thread's fn(id, result) settles its waits.
napi_value SetSettler(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Env* e = nullptr;
  napi_get_instance_data(env, reinterpret_cast<void**>(&e));
  if (e != nullptr) return nullptr;
  e = new Env{nullptr, false};
  napi_value name;
  napi_create_string_utf8(env, "atomic-limiter host waits", NAPI_AUTO_LENGTH, &name);
  napi_create_threadsafe_function(env, argv[0], nullptr, name, 0, 1, nullptr, nullptr, nullptr,
                                  callJs, &e->tsfn);
  // Waiting must not keep a process alive (as Atomics.waitAsync does not).
  napi_unref_threadsafe_function(env, e->tsfn);
  napi_set_instance_data(env, e, nullptr, nullptr);
  napi_add_env_cleanup_hook(env, envCleanup, e);
  return nullptr;
}

uint32_t* wordOf(napi_env env, napi_value buffer, napi_value byteOffset, Mapping** mapping) {
  size_t base = 0, length = 0;
  Mapping* m = mappingOf(env, buffer, &base, &length);
  if (m == nullptr) return nullptr;
  size_t offset = static_cast<size_t>(getNumber(env, byteOffset));
  if (offset % 4 != 0 || offset + 4 > length) {
    napi_throw_range_error(env, nullptr, "atomic-limiter/host: a word outside the buffer");
    return nullptr;
  }
  *mapping = m;
  return reinterpret_cast<uint32_t*>(static_cast<char*>(m->base) + base + offset);
}

napi_value Wake(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Mapping* m = nullptr;
  uint32_t* addr = wordOf(env, argv[0], argv[1], &m);
  if (addr == nullptr) return nullptr;
  syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  return nullptr;
}

napi_value WaitWord(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  Env* e = nullptr;
  napi_get_instance_data(env, reinterpret_cast<void**>(&e));
  if (e == nullptr) {
    napi_throw_error(env, nullptr, "atomic-limiter/host: setSettler() first");
    return nullptr;
  }
  Mapping* m = nullptr;
  uint32_t* addr = wordOf(env, argv[0], argv[1], &m);
  if (addr == nullptr) return nullptr;
  int64_t value = 0;
  napi_get_value_int64(env, argv[2], &value);
  double timeoutMs = getNumber(env, argv[3]);
  int64_t deadline = INT64_MAX;
  if (timeoutMs >= 0 && timeoutMs < 1e15) {
    deadline = nowNs() + static_cast<int64_t>(timeoutMs * 1e6);
  }
  uint64_t id;
  {
    std::lock_guard<std::mutex> hold(waitLock);
    id = nextWaitId++;
    m->refs.fetch_add(1);
    waits.push_back({id, addr, static_cast<uint32_t>(value), deadline, e, m});
    if (!threadStarted) {
      threadStarted = true;
      std::thread(waiterThread).detach();
    }
  }
  poke();
  napi_value result;
  napi_create_double(env, static_cast<double>(id), &result);
  return result;
}

napi_value Init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
      {"open", nullptr, Open, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"view", nullptr, View, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"commit", nullptr, Commit, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"unlink", nullptr, Unlink, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"alive", nullptr, Alive, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"setSettler", nullptr, SetSettler, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"wake", nullptr, Wake, nullptr, nullptr, nullptr, napi_default, nullptr},
      {"wait", nullptr, WaitWord, nullptr, nullptr, nullptr, napi_default, nullptr},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

}  // namespace

NAPI_MODULE_INIT() { return Init(env, exports); }
