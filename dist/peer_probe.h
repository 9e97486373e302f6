// After a collective failed: which peers' hosts still answer, for an error message that names the
// rank and host that was lost instead of "a peer may have died".
//
// Each peer's host is probed with one TCP connection attempt to the job's master port, all peers
// at once, for a bounded time. A host that accepts or refuses (RST) the connection is up and
// reachable; one that stays silent or is reported unreachable (ICMP, no ARP reply) is not: its
// network failed, its cable was pulled, or it is down. The probe sends no data.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace kestrel::dist {

struct PeerHost {
  int rank = 0;
  std::string address;  // IPv4, as the peer reached the rendezvous store from
};

// The peers whose hosts did not answer within `bound`.
std::vector<PeerHost> silent_peers(const std::vector<PeerHost>& peers, int port,
                                   std::chrono::milliseconds bound);

// The end of the failure message: "rank 2 at 10.77.0.3 stopped answering: ...", or, when every
// host answered, that a peer process may have died or be stuck. `peers` excludes this rank.
std::string describe_lost_peers(const std::vector<PeerHost>& peers, const std::vector<PeerHost>& silent,
                                std::chrono::milliseconds bound);

}  // namespace kestrel::dist
