// tools/hiq/scheduler_json.h — the scheduler's counters as the JSON object that
// `hiq sim --json` and `hiq bench serve --json` print under "scheduler".
#pragma once

#include <nlohmann/json.hpp>

#include "engine/scheduler.h"

namespace hiq::cli {

inline nlohmann::json scheduler_json(const SchedulerStats& q) {
  return {{"prefill_steps", q.prefill_steps},
          {"decode_steps", q.decode_steps},
          {"prefill_seconds", q.prefill_seconds},
          {"decode_seconds", q.decode_seconds},
          {"admitted", q.admitted},
          {"queue_s_mean", q.admitted > 0 ? q.queue_seconds / static_cast<double>(q.admitted) : 0.0},
          {"admission_waits", q.admission_waits},
          {"transfer_drains", q.transfer_drains},
          {"retractions", q.retractions},
          {"prefill_chunks", q.prefill_chunks}};
}

}  // namespace hiq::cli
