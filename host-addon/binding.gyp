{
  "targets": [
    {
      "target_name": "atomic_limiter_host",
      "sources": ["region.cc"],
      "cflags_cc": ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "defines": ["NAPI_VERSION=8"],
      "conditions": [
        ["OS=='linux'", { "libraries": ["-lpthread"] }]
      ]
    }
  ]
}
