// The job's secret: 32 random bytes (64 hex digits) in a file of mode 0600, written by
// `troupe launch` and `troupe tls init` into the job directory and passed to nodes by
// file (--secret-file), never on a command line. A node proves it holds the secret when
// it joins (Note [Join proofs]); the coordinator refuses a join without a valid proof
// before telling the node anything about the job.
//
// Note [Join proofs]
// proof = HMAC-SHA256(secret, "troupe-join-v1" | job id | role | joining node | coordinator
// node), each field NUL-terminated, as 64 hex digits. The nodes are the CAF node ids as
// the two sides see them, so a proof is good only for the node that made it, for that
// role, at that coordinator: one copied from another node's join, another role's or
// another job's is refused. It is not a nonce: a proof copied off the wire could be
// replayed by a peer that also announces the joining node's id, which is why TLS (which
// keeps the wire private) stays on by default; without TLS the secret keeps strangers
// out only as long as nobody on the path can read loopback or the network.
#pragma once

#include <string>
#include <string_view>

#include "base/expected.hpp"

namespace troupe {

inline constexpr std::size_t job_secret_hex_digits = 64;

// Writes a new random secret to `path` (mode 0600; refuses to overwrite) and returns it.
expected<std::string> create_job_secret(const std::string& path);
// Reads a secret: the file must belong to this user, be readable by nobody else, and
// hold exactly 64 hex digits (a trailing newline is allowed).
expected<std::string> load_job_secret(const std::string& path);

std::string join_proof(std::string_view secret, std::string_view job_id, std::string_view role,
                       std::string_view joining_node, std::string_view coordinator_node);
// The job's tag for its shared-memory segments (Note [Same-host fast path] in
// transport/shared_slots.hpp): the first 16 hex digits of HMAC-SHA256(secret,
// "troupe-shm-v1" | job id). It tells one job's segments from another's; it reveals
// nothing of the secret, since segment names are visible to every user of the host.
std::string shared_memory_tag(std::string_view secret, std::string_view job_id);
// Compares in constant time.
bool proofs_match(std::string_view expected_proof, std::string_view given);

}  // namespace troupe
