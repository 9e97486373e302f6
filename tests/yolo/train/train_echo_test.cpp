// The start-up echoes of a training run: the options under the reference's names and in its
// order, with Python's spelling of values, then Kestrel's own; the hyperparameters in file order.
#include "yolo/train/train_echo.h"

#include <gtest/gtest.h>

#include <string>

#include "yolo/common/console.h"

using namespace kestrel::yolo;

TEST(TrainEcho, TheReferencesOrderAndSpellingThenKestrelsOwn) {
  TrainOptions o;
  o.weights = "yolov5n.pt";
  o.cfg = "";
  o.data = "coco128.yaml";
  o.epochs = 3;
  o.img_size = 320;
  o.rect = true;
  const std::string text = args_text(train_args_echo(o));
  EXPECT_EQ(text.rfind("weights=yolov5n.pt, cfg=, data=coco128.yaml, hyp=, epochs=3, batch_size=16, imgsz=320, "
                       "rect=True, resume=False, nosave=False, noval=False, noautoanchor=False, noplots=False, "
                       "evolve=None, cache=None, image_weights=False, device=, multi_scale=False, single_cls=False, "
                       "optimizer=SGD, sync_bn=False, workers=8, project=runs/train, name=exp, exist_ok=False, "
                       "quad=False, cos_lr=False, "
                       "label_smoothing=0.0, patience=100, freeze=[0], save_period=-1, seed=0, ",
                       0),
            0u)
      << text;
  // Kestrel's own options come after the reference's.
  EXPECT_LT(text.find("seed=0"), text.find("amp="));
  EXPECT_NE(text.find("bucket_cap_mb=4.0"), std::string::npos) << text;

  o.resume = "";
  EXPECT_NE(args_text(train_args_echo(o)).find("rect=True, resume=True, "), std::string::npos);
  o.resume = "runs/train/exp/weights/last.pt";
  EXPECT_NE(args_text(train_args_echo(o)).find("resume=runs/train/exp/weights/last.pt, "), std::string::npos);
  o.freeze = {0, 1, 2};
  o.evolve = 300;
  o.cache = CacheMode::Ram;
  const std::string more = args_text(train_args_echo(o));
  EXPECT_NE(more.find("freeze=[0, 1, 2]"), std::string::npos) << more;
  EXPECT_NE(more.find("evolve=300, cache=ram"), std::string::npos) << more;
}

TEST(TrainEcho, HyperparametersInFileOrderAsPythonPrintsThem) {
  Hyp hyp;
  hyp.label_smoothing = 0.1;  // an option in the reference, not a key of its hyp dict
  EXPECT_EQ(hyp_echo(hyp),
            "lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, warmup_epochs=3.0, warmup_momentum=0.8, "
            "warmup_bias_lr=0.1, box=0.05, cls=0.5, cls_pw=1.0, obj=1.0, obj_pw=1.0, iou_t=0.2, anchor_t=4.0, "
            "fl_gamma=0.0, hsv_h=0.015, hsv_s=0.7, hsv_v=0.4, degrees=0.0, translate=0.1, scale=0.5, shear=0.0, "
            "perspective=0.0, flipud=0.0, fliplr=0.5, mosaic=1.0, mixup=0.0, copy_paste=0.0");
  hyp.anchors = 3;
  EXPECT_NE(hyp_echo(hyp).find("anchor_t=4.0, anchors=3, fl_gamma=0.0"), std::string::npos) << hyp_echo(hyp);
}
