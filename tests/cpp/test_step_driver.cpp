// The per-step host logic (step_driver.h) against onnxruntime's documented rules: DynamicLossScaler
// (halve on a non-finite update, double after up_scale_window finite ones, within [min, max]) and
// gradient accumulation (the first run of each group overwrites the buffers, the last updates; a
// skipped update is not a step).
#include <gtest/gtest.h>

#include "onnxtrain/error.h"
#include "onnxtrain/step_driver.h"

using namespace onnxtrain;

TEST(StepDriver, DynamicLossScaleFollowsOnnxruntimesRule) {
  LossScaleState s;
  s.scale = s.initial_scale = 8;
  s.up_scale_window = 2;
  s.min_scale = 2;
  s.max_scale = 32;
  const bool finite[] = {true, true, false, true, true, true, true, true, true, false, false, false};
  const double want[] = {8, 16, 8, 8, 16, 16, 32, 32, 32, 16, 8, 4};
  for (size_t i = 0; i < std::size(finite); ++i) {
    s.update(finite[i]);
    EXPECT_EQ(s.scale, want[i]) << "after update " << i;
  }
  EXPECT_EQ(s.skipped, 4);
  s.update(false);
  EXPECT_EQ(s.scale, 2);  // not below min_scale
  s.update(false);
  EXPECT_EQ(s.scale, 2);
  s.update(true);
  EXPECT_EQ(s.stable_steps, 1);
  s.reset();
  EXPECT_EQ(s.scale, 8);
  EXPECT_EQ(s.stable_steps, 0);
  EXPECT_EQ(s.skipped, 6);  // kept
  // A static scaler keeps its scale and counts the skips.
  LossScaleState fixed;
  fixed.dynamic = false;
  fixed.scale = 128;
  for (int i = 0; i < 5000; ++i) fixed.update(i % 3 != 0);
  EXPECT_EQ(fixed.scale, 128);
  EXPECT_EQ(fixed.skipped, 1667);
}

TEST(StepDriver, ValidateNamesTheField) {
  LossScaleState s;
  EXPECT_NO_THROW(s.validate());
  s.min_scale = 64;
  s.max_scale = 8;
  try {
    s.validate();
    ADD_FAILURE() << "min_scale above max_scale accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("min_scale 64 is above max_scale 8"), std::string::npos) << e.what();
  }
  LossScaleState w;
  w.up_scale_window = 0;
  EXPECT_THROW(w.validate(), InvalidArgument);
  LossScaleState n;
  n.scale = -1;
  EXPECT_THROW(n.validate(), InvalidArgument);
}

TEST(StepDriver, AccumulationResetsOnFirstRunAndStepsOnAppliedUpdates) {
  StepDriver d;
  d.accumulation_steps = 3;
  std::vector<int> resets, updates;
  for (int run = 0; run < 9; ++run) {
    if (d.reset_due()) resets.push_back(run);
    if (d.update_due()) updates.push_back(run);
    d.finish_run(run != 5);  // the update of run 5 is skipped (a non-finite gradient)
  }
  EXPECT_EQ(resets, (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(updates, (std::vector<int>{2, 5, 8}));
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.micro, 0);
  StepDriver one;  // no accumulation: every run resets and updates
  EXPECT_TRUE(one.reset_due() && one.update_due());
  one.finish_run(true);
  EXPECT_EQ(one.step, 1);
}
