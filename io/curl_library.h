// libcurl, opened at the first download rather than linked. Only downloads need it, and a binary
// that links it carries its TLS stack everywhere (about 5 MiB packed, with Kerberos, LDAP and
// two TLS libraries): the relocatable bundle for GPU machines, which have no network, leaves it
// out, and `kestrel` still starts there. The entry points used are resolved once, by name, from
// the soname given; <curl/curl.h> supplies only the types and constants.
#pragma once
#include <curl/curl.h>

#include <string>

namespace kestrel {

struct CurlLibrary {
  CURLcode (*global_init)(long flags);
  CURL* (*easy_init)();
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_perform)(CURL*);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  void (*easy_cleanup)(CURL*);
  const char* (*easy_strerror)(CURLcode);
};

// The process's libcurl (libcurl.so.4), opened and initialised (curl_global_init) on the first
// call; later calls return the same table. Throws, naming the library, dlopen's reason and
// `manual` (what to do by hand instead), when it cannot be opened or lacks an entry point; a
// later call tries again.
const CurlLibrary& curl_library(const std::string& manual = "");

// Opens `soname` and resolves the table without caching it or initialising curl (tests use it to
// check the refusal for a library that is not there).
CurlLibrary open_curl_library(const std::string& soname, const std::string& manual = "");

}  // namespace kestrel
