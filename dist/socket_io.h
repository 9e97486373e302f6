// Blocking TCP helpers shared by the rendezvous store (dist/store.cpp) and the client of torchrun's
// agent store (dist/torch_store.cpp): bounded connects and reads, full sends, keep-alive probes.
#pragma once
#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace kestrel::dist::net {

using Clock = std::chrono::steady_clock;

enum class ReadStatus { Ok, Closed, TimedOut };

// Sends every byte (retrying short sends); false when the connection is gone.
bool send_all(int fd, const std::string& bytes);

// Reads exactly n bytes; with a deadline, gives up once it passes.
ReadStatus read_exact(int fd, char* dst, size_t n, const Clock::time_point* deadline);

// Keep-alive probes after 10 s of silence and a 30 s bound on unacknowledged data: a connection to a
// host that vanished (power, a cut link) closes within about half a minute instead of hours.
void keep_alive(int fd);

// A connected TCP socket to addr, or -1 with `error` set when this attempt failed. The connect
// itself is bounded by the deadline (a silent remote host would otherwise block minutes). `silent`
// says whether the host itself gave no sign of life (timeout, unreachable), as opposed to refusing
// the connection.
int try_connect(const sockaddr_in& addr, Clock::time_point deadline, std::string& error, bool& silent);

// The IPv4 address of the master host with `port`; fails naming the rank and the flag to fix when
// the name does not resolve.
sockaddr_in resolve_master(const std::string& host, int port, int rank);

// The local IPv4 address of a connected socket, as text.
std::string local_address(int fd);

}  // namespace kestrel::dist::net
