// Bucket cuts from one measured step: where to end buckets so that the link starts early and the
// gradient that arrives late is all-reduced in small pieces.
//
// The byte cap alone cuts buckets blind to time: with yolov5n's 7.5 MB gradient a cap of 8 or
// 25 MB leaves one 7 MB bucket that is ready only 57-61 % into backward, and whose all-reduce may
// outlast what is left of backward (docs/history/distributed.md, overlap where bandwidth is the
// bottleneck). Given when each gradient arrived and what the link cost in that step, the cuts
// below come from a model of one link that all-reduces the buckets one after another, each
// costing a fixed per-bucket time plus its bytes at kLinkHeadroom times the measured rate: of the
// layouts whose last all-reduce ends within a tolerance of the earliest possible, the one with the
// fewest buckets. A cap is an upper bound: no bucket spans more (a parameter larger than the cap
// still gets a bucket of its own).
#pragma once
#include <cstdint>
#include <vector>

#include "dist/reducer_state.h"
#include "dist/timeline.h"

namespace kestrel::dist {

// The link as one step saw it: what a bucket costs from readiness to finish.
struct LinkEstimate {
  double us_per_byte = 0;    // the measured transfer time per byte, beside backward
  double per_bucket_us = 0;  // the fixed cost of one bucket (launch and latency)
  bool valid() const { return us_per_byte > 0; }
};

// A bucket's all-reduce never costs less than this in the model: the order of one small Gloo or
// NCCL collective's latency, so that the cuts do not split into buckets the model thinks are free.
inline constexpr double kMinBucketUs = 100.0;
// The cuts plan for an all-reduce this many times slower than the step measured: one step cannot
// see the spread, and beside backward on shared cores the same 7 MB bucket took 89-149 ms where it
// takes 62 ms alone (docs/history/distributed.md). Too slow a link in the plan costs a few more buckets;
// too fast a one leaves a large bucket exposed.
inline constexpr double kLinkHeadroom = 2.0;
// Layouts that end within this share of backward (or one bucket's fixed cost, if larger) of the
// earliest finish count as equal, and the fewest buckets wins: in an idle link's model every
// extra bucket looks free, while each costs the ranks' communication threads real time.
inline constexpr double kFinishTolerance = 0.01;

// From one finished step's timeline (ready, launch and done times of every bucket): the rate is
// the buckets' bytes over the link's busy time (each bucket from its launch, or the previous
// bucket's finish if later, to its own finish), the per-bucket cost the median time from a
// bucket's readiness to its launch, at least kMinBucketUs. Invalid (us_per_byte 0) where no
// bucket's finish was seen or the link was never measurably busy.
LinkEstimate estimate_link(const StepTimeline& t);

// cuts[i] is true where a new bucket must begin at order[i] (for BucketPlan::build's cut list).
// arrival_us: per parameter, when its gradient arrived (from backward's start; parameters that got
// none: when backward ended). Each dtype group is cut on its own, as if it had the link to itself.
// In the model each bucket starts once its last gradient is in and the link is free, and costs
// link.per_bucket_us (at least kMinBucketUs) + its span in bytes * link.us_per_byte *
// kLinkHeadroom. A dynamic programme over the cut positions and the bucket count finds, for every
// count, the earliest the group's last bucket can finish; the fewest buckets within
// max(per-bucket cost, kFinishTolerance * the latest arrival) of the best count wins. Buckets span
// at most cap_bytes (padding to kGradAlignBytes included) unless one parameter is larger. Only
// deterministic arithmetic on its arguments: the same inputs give the same cuts on every rank.
std::vector<bool> timed_cuts(const std::vector<ParamInfo>& params, const std::vector<int>& order,
                             const std::vector<double>& arrival_us, const LinkEstimate& link,
                             int64_t cap_bytes);

}  // namespace kestrel::dist
