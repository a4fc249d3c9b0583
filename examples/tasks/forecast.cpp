// forecast: a real time series with a general TCN (not locuslab's
// configuration): the weekly CO2 concentration at Mauna Loa, 1958-2001 (the
// public-domain data set Debian's python3-statsmodels ships; scripts/get_data.sh
// co2 puts it in data/co2/co2.csv), or any CSV of the same form: a header, then
// "label,value" rows, empty or nan for a missing value. Refused, by row: a value
// that is not a number (trailing bytes, a NUL included), an infinite one (inf,
// 1e999), one past +-1e150 or a change between two values past it (its square
// would overflow the scale and the RMSE), a series with fewer than two values.
//
// From each origin t the model reads the last --window weekly changes
// s[t-W+1] - s[t-W], ..., s[t] - s[t-1] and predicts the next --horizon values
// as changes from s[t]. The last --test_fraction of the series is the test set
// (its targets never reach into training). Three baselines, scored on the same
// test origins: persistence (s[t+k] = s[t]), seasonal persistence (last year's
// change from the same week: s[t] + s[t+k-P] - s[t-P]) and a linear AR model
// over the same window, fitted by least squares. Scores are RMSE in the
// series' units (ppm), over all horizons.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "examples/common/program.h"
#include "common.h"
#include "core/files.h"
#include "ops/ops.h"

namespace {

using namespace tcn;

struct Series {
  std::vector<std::string> labels;
  std::vector<double> values;  // missing ones interpolated
  int64_t missing = 0;
};

// A value's magnitude and a change's: past this, squares (the scale, the RMSE) overflow a double.
constexpr double kMaxMagnitude = 1e150;

// A field for an error message: at most 40 bytes, control bytes shown as '?'.
std::string shown(std::string_view v) {
  std::string out;
  for (char c : v.substr(0, 40)) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  return v.size() > 40 ? out + "... (" + std::to_string(v.size()) + " bytes)" : out;
}

// "label,value" rows after a header; a missing value (empty, or nan) is filled
// linearly from its neighbours (the nearest one at either end).
Series read_series(const std::string& path) {
  const std::string text = [&] {
    try {
      return tcn::read_regular_file(path);
    } catch (const tcn::Error& e) {
      TCN_FAIL("--data ", e.what(), "; the CO2 series: scripts/get_data.sh co2");
    }
  }();
  Series s;
  std::vector<bool> known;
  size_t pos = text.find('\n');  // after the header
  int64_t row = 1;
  while (pos != std::string::npos && pos + 1 < text.size()) {
    const size_t start = pos + 1;
    pos = text.find('\n', start);
    std::string_view line(text.data() + start, (pos == std::string::npos ? text.size() : pos) - start);
    ++row;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t comma = line.find(',');
    TCN_CHECK(comma != std::string::npos, "--data ", path, ": line ", row, " is not 'label,value': ", shown(line));
    const std::string v(line.substr(comma + 1));
    s.labels.emplace_back(line.substr(0, comma));
    char* end = nullptr;
    const double x = v.empty() ? NAN : std::strtod(v.c_str(), &end);
    TCN_CHECK(v.empty() || end == v.c_str() + v.size(), "--data ", path, ": line ", row, ": value '", shown(v),
              "' is not a number");
    TCN_CHECK(std::isnan(x) || std::abs(x) <= kMaxMagnitude, "--data ", path, ": line ", row, ": value '", shown(v),
              "' is ", std::isinf(x) ? "infinite" : "too large", " (values must be finite and within +-",
              kMaxMagnitude, "; empty or nan marks a missing one)");
    known.push_back(!std::isnan(x));
    s.values.push_back(x);
  }
  const int64_t n = static_cast<int64_t>(s.values.size());
  const int64_t n_known = std::count(known.begin(), known.end(), true);
  TCN_CHECK(n_known >= 2, "--data ", path, ": ", n_known, " value(s) in ", n, " row(s) (the rest missing); at least two "
            "are needed");
  int64_t prev = -1;
  for (int64_t i = 0; i <= n; ++i) {
    if (i < n && !known[i]) continue;
    for (int64_t j = prev + 1; j < i; ++j) {  // a run of missing values between prev and i (one of them known)
      ++s.missing;
      s.values[j] = prev < 0 ? s.values[i] : i == n ? s.values[prev]
                             : s.values[prev] + (s.values[i] - s.values[prev]) * static_cast<double>(j - prev) /
                                                    static_cast<double>(i - prev);
    }
    prev = i;
  }
  for (int64_t i = 1; i < n; ++i)
    TCN_CHECK(std::abs(s.values[i] - s.values[i - 1]) <= kMaxMagnitude, "--data ", path, ": the change from '",
              shown(s.labels[i - 1]), "' to '", shown(s.labels[i]), "' is ", s.values[i] - s.values[i - 1],
              ", past +-", kMaxMagnitude, " (its square would overflow)");
  return s;
}

// Ridge least squares: w [F, H] minimising |X w - Y|^2 + lambda |w|^2, by
// Cholesky of the normal equations (F is a window, at most a few hundred).
std::vector<double> least_squares(const std::vector<double>& X, const std::vector<double>& Y, int64_t N, int64_t F,
                                  int64_t H, double lambda) {
  std::vector<double> A(F * F, 0.0), B(F * H, 0.0);
  for (int64_t r = 0; r < N; ++r) {
    const double* x = &X[r * F];
    for (int64_t i = 0; i < F; ++i) {
      for (int64_t j = 0; j <= i; ++j) A[i * F + j] += x[i] * x[j];
      for (int64_t h = 0; h < H; ++h) B[i * H + h] += x[i] * Y[r * H + h];
    }
  }
  for (int64_t i = 0; i < F; ++i) A[i * F + i] += lambda;
  for (int64_t j = 0; j < F; ++j) {  // A = L L^T, L in the lower triangle
    for (int64_t k = 0; k < j; ++k) A[j * F + j] -= A[j * F + k] * A[j * F + k];
    TCN_CHECK(A[j * F + j] > 0, "forecast: the linear baseline's normal equations are singular");
    A[j * F + j] = std::sqrt(A[j * F + j]);
    for (int64_t i = j + 1; i < F; ++i) {
      for (int64_t k = 0; k < j; ++k) A[i * F + j] -= A[i * F + k] * A[j * F + k];
      A[i * F + j] /= A[j * F + j];
    }
  }
  for (int64_t h = 0; h < H; ++h) {  // forward then back substitution, per output
    for (int64_t i = 0; i < F; ++i) {
      for (int64_t k = 0; k < i; ++k) B[i * H + h] -= A[i * F + k] * B[k * H + h];
      B[i * H + h] /= A[i * F + i];
    }
    for (int64_t i = F; i-- > 0;) {
      for (int64_t k = i + 1; k < F; ++k) B[i * H + h] -= A[k * F + i] * B[k * H + h];
      B[i * H + h] /= A[i * F + i];
    }
  }
  return B;
}

// The flags of forecast's own.
struct ForecastFlags {
  std::string data = "data/co2/co2.csv", predictions = "runs/forecast_predictions.csv";
  int64_t window = 104, horizon = 4, season = 52;
  double test_fraction = 0.2;
};

// The origins t of the training and test windows. A window needs t >= W (and t >= P for
// the seasonal baseline), its targets t + H < n. Training targets end before `split`,
// test origins start at split - 1. Caps keep the latest training and the first test
// windows.
struct Origins {
  int64_t split = 0;
  std::vector<int64_t> train, test;
};
Origins origins(const ForecastFlags& f, int64_t n, int64_t train_cap, int64_t test_cap) {
  Origins o;
  o.split = static_cast<int64_t>(std::floor(static_cast<double>(n) * (1 - f.test_fraction)));
  const int64_t first = std::max(f.window, f.season);
  for (int64_t t = first; t + f.horizon < o.split; ++t) o.train.push_back(t);
  for (int64_t t = std::max(first, o.split - 1); t + f.horizon < n; ++t) o.test.push_back(t);
  TCN_CHECK(!o.train.empty() && !o.test.empty(), "--data ", f.data, ": ", n, " values are too few for --window ",
            f.window, ", --season ", f.season, ", --horizon ", f.horizon, " and --test_fraction ", f.test_fraction,
            " (no ", o.train.empty() ? "training" : "test", " windows)");
  if (static_cast<int64_t>(o.train.size()) > train_cap) o.train.erase(o.train.begin(), o.train.end() - train_cap);
  if (static_cast<int64_t>(o.test.size()) > test_cap) o.test.resize(static_cast<size_t>(test_cap));
  return o;
}

// The scale of inputs and targets: the standard deviation of the training period's steps.
double step_scale(const std::vector<double>& v, int64_t split, const std::string& data) {
  double m = 0, ss = 0;
  for (int64_t i = 1; i < split; ++i) m += v[i] - v[i - 1];
  m /= static_cast<double>(split - 1);
  for (int64_t i = 1; i < split; ++i) ss += (v[i] - v[i - 1] - m) * (v[i] - v[i - 1] - m);
  const double scale = std::sqrt(ss / static_cast<double>(split - 1));
  TCN_CHECK(scale > 0, "--data ", data, ": the series does not change over its training part");
  return scale;
}

// The windows at `origins`: x, the W changes up to t / scale; y, s[t+k] - s[t] for k = 1..H, / scale.
tasks::Dataset windows(const std::vector<double>& v, const std::vector<int64_t>& origins, int64_t W, int64_t H,
                       double scale) {
  const int64_t N = static_cast<int64_t>(origins.size());
  std::vector<float> x(static_cast<size_t>(N * W)), y(static_cast<size_t>(N * H));
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = origins[r];
    for (int64_t i = 0; i < W; ++i) x[r * W + i] = static_cast<float>((v[t - W + 1 + i] - v[t - W + i]) / scale);
    for (int64_t k = 1; k <= H; ++k) y[r * H + k - 1] = static_cast<float>((v[t + k] - v[t]) / scale);
  }
  return tasks::Dataset{from_vector(x, {N, W, 1}), from_vector(y, {N, H})};
}

// The training origins in a fixed random order (a seed-driven shuffle).
std::vector<int64_t> shuffled(const std::vector<int64_t>& origins, uint64_t seed) {
  Generator gen = tasks::data_generator(seed);
  const std::vector<int64_t> order = tasks::random_ints(static_cast<int64_t>(origins.size()), 1 << 30, gen);
  std::vector<size_t> idx(origins.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return order[a] < order[b]; });
  std::vector<int64_t> out;
  for (size_t i : idx) out.push_back(origins[i]);
  return out;
}

// A dataset's windows as least-squares features: the W inputs and a constant 1.
std::vector<double> features(const tasks::Dataset& d, int64_t W) {
  const int64_t F = W + 1;
  const std::vector<float> x = d.x.to_vector<float>();
  std::vector<double> X(static_cast<size_t>(d.size() * F));
  for (int64_t r = 0; r < d.size(); ++r) {
    for (int64_t i = 0; i < W; ++i) X[r * F + i] = x[r * W + i];
    X[r * F + W] = 1.0;
  }
  return X;
}

// The three baselines on the test origins: RMSE in the series' units over all
// horizons, and the linear model's forecasts (for the predictions file).
struct Baselines {
  double persistence = 0, seasonal = 0, linear = 0;
  std::vector<double> linear_pred;  // [test origin, horizon], in the series' units
};
Baselines baselines(const std::vector<double>& v, const std::vector<int64_t>& test_t, const tasks::Dataset& train,
                    const tasks::Dataset& test, int64_t W, int64_t H, int64_t P, double scale) {
  const int64_t Ntr = train.size(), Nte = test.size(), F = W + 1;
  const std::vector<float> ytr_f = train.y.to_vector<float>();
  const std::vector<double> ytr(ytr_f.begin(), ytr_f.end());
  const std::vector<double> w = least_squares(features(train, W), ytr, Ntr, F, H, 1e-3 * static_cast<double>(Ntr));
  const std::vector<double> Xte = features(test, W);
  Baselines b;
  b.linear_pred.resize(static_cast<size_t>(Nte * H));
  double se_persist = 0, se_season = 0, se_linear = 0;
  for (int64_t r = 0; r < Nte; ++r) {
    const int64_t t = test_t[r];
    for (int64_t k = 1; k <= H; ++k) {
      const double truth = v[t + k];
      double lin = 0;
      for (int64_t i = 0; i < F; ++i) lin += Xte[r * F + i] * w[i * H + k - 1];
      const double linear = v[t] + lin * scale, seasonal = v[t] + v[t + k - P] - v[t - P];
      b.linear_pred[r * H + k - 1] = linear;
      se_persist += (truth - v[t]) * (truth - v[t]);
      se_season += (truth - seasonal) * (truth - seasonal);
      se_linear += (truth - linear) * (truth - linear);
    }
  }
  const double count = static_cast<double>(Nte * H);
  b.persistence = std::sqrt(se_persist / count), b.seasonal = std::sqrt(se_season / count);
  b.linear = std::sqrt(se_linear / count);
  return b;
}

// The test set's forecasts, one CSV row per origin and horizon, beside the truth and the
// baselines'. Whole or not at all: a failed write (a full disk) leaves an earlier file as it was.
void write_predictions(const std::string& path, tasks::TaskTCN& model, const tasks::Dataset& test,
                       const std::vector<int64_t>& test_t, const Series& s, const ForecastFlags& f, double scale,
                       const std::vector<double>& linear_pred, int64_t batch_size) {
  const std::vector<double>& v = s.values;
  const int64_t Nte = test.size(), H = f.horizon, P = f.season;
  autograd::NoGrad ng;
  const Device dev = model.linear->weight.device();
  std::vector<float> tcn_out;
  for (int64_t i = 0; i < Nte; i += batch_size) {
    const tasks::Dataset b = test.slice(i, std::min(batch_size, Nte - i)).to(dev);
    const std::vector<float> part = model.forward(b.x, 1).to(Device::cpu()).to_vector<float>();
    tcn_out.insert(tcn_out.end(), part.begin(), part.end());
  }
  std::string csv = "label,horizon,actual,tcn,linear,persistence,seasonal\n";
  for (int64_t r = 0; r < Nte; ++r) {
    const int64_t t = test_t[r];
    for (int64_t k = 1; k <= H; ++k) {
      char row[256];
      std::snprintf(row, sizeof row, ",%lld,%.6g,%.6g,%.6g,%.6g,%.6g\n", static_cast<long long>(k), v[t + k],
                    v[t] + tcn_out[r * H + k - 1] * scale, linear_pred[r * H + k - 1], v[t],
                    v[t] + v[t + k - P] - v[t - P]);
      csv += s.labels[t + k] + row;
    }
  }
  tcn::write_file_atomic(path, {csv}, "--predictions: ", /*make_parents=*/true);
  std::printf("forecast: wrote %s (%lld test forecasts x %lld horizons)\n", path.c_str(), static_cast<long long>(Nte),
              static_cast<long long>(H));
}

// Reads the series, builds the windows, scores the baselines and trains the TCN.
int run(tasks::TaskSetup& task, const ForecastFlags& f) {
  tasks::CommonOptions& o = task.opts;
  tasks::check_common_flags(o);
  tasks::check("--window", f.window, 2, 100000);
  tasks::check("--horizon", f.horizon, 1, 1000);
  tasks::check("--season", f.season, 1, 100000);
  tasks::check_real("--test_fraction", f.test_fraction, 0, 1, true, true);
  if (!f.predictions.empty()) program::check_output_path("--predictions", f.predictions);
  task.inputs = 1, task.outputs = f.horizon;
  const tasks::RunPlan plan = tasks::plan_run(task);  // bad input fails before the data is read
  const Series s = read_series(f.data);
  const int64_t n = static_cast<int64_t>(s.values.size());
  const Origins t = origins(f, n, o.train_size, o.test_size);
  const double scale = step_scale(s.values, t.split, f.data);
  task.train = windows(s.values, shuffled(t.train, o.seed), f.window, f.horizon, scale);
  task.test = windows(s.values, t.test, f.window, f.horizon, scale);  // in time order
  const Baselines base = baselines(s.values, t.test, task.train, task.test, f.window, f.horizon, f.season, scale);
  std::printf("forecast: %s, %lld values (%lld missing, filled linearly), step scale %.4g; %lld training and %lld "
              "test windows of %lld steps, %lld ahead\n",
              f.data.c_str(), static_cast<long long>(n), static_cast<long long>(s.missing), scale,
              static_cast<long long>(task.train.size()), static_cast<long long>(task.test.size()),
              static_cast<long long>(f.window), static_cast<long long>(f.horizon));
  std::printf("forecast: baselines, test RMSE: persistence %.4f, seasonal persistence (period %lld) %.4f, linear "
              "AR(%lld) by least squares %.4f\n",
              base.persistence, static_cast<long long>(f.season), base.seasonal, static_cast<long long>(f.window),
              base.linear);
  std::fflush(stdout);

  task.loss = tasks::mse_last;
  task.evaluate = [](const tasks::TaskTCN& model, const tasks::Dataset& b, tasks::EvalSums& sums) {
    sums.loss_sum += tasks::mse_last(model, b).item() * static_cast<double>(b.y.numel());
    sums.loss_count += b.y.numel();
  };
  task.describe_test = [scale, persistence = base.persistence, seasonal = base.seasonal,
                        linear = base.linear](double test_loss) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "RMSE %.4f (persistence %.4f, seasonal %.4f, linear %.4f)",
                  std::sqrt(test_loss) * scale, persistence, seasonal, linear);
    return std::string(buf);
  };
  task.finish = [&](tasks::TaskTCN& model) {
    if (!f.predictions.empty())
      write_predictions(f.predictions, model, task.test, t.test, s, f, scale, base.linear_pred, o.batch_size);
  };
  return tasks::train(task, plan);
}

}  // namespace

int main(int argc, char** argv) {
  tasks::TaskSetup task;
  task.program = "forecast";
  tasks::CommonOptions& o = task.opts;
  o.batch_size = 32, o.dropout = 0.1, o.clip = -1, o.epochs = 30, o.ksize = 3, o.levels = 5, o.nhid = 32;
  o.log_interval = 200, o.lr = 2e-3, o.optim = "Adam", o.seed = 1111;
  o.train_size = 100000000, o.test_size = 100000000;  // caps: all windows
  ForecastFlags f;
  // A general TCN, not locuslab's: layer norm, GELU, skip connections, xavier init.
  task.tcn_defaults = {{"use_norm", "layer_norm"},
                       {"activation", "gelu"},
                       {"use_skip_connections", true},
                       {"kernel_initializer", "xavier_uniform"}};

  CLI::App app{"forecast: a TCN forecasting a real time series (weekly Mauna Loa CO2), tcn framework", "forecast"};
  app.add_option("--data", f.data, "CSV: a header, then 'label,value' rows")->capture_default_str();
  app.add_option("--window", f.window, "past steps the model reads, in [2, 100000]")->capture_default_str();
  app.add_option("--horizon", f.horizon, "steps ahead it predicts, in [1, 1000]")->capture_default_str();
  app.add_option("--season", f.season, "the seasonal baseline's period in steps, in [1, 100000]")
      ->capture_default_str();
  app.add_option("--test_fraction", f.test_fraction, "the series' last part held out, in (0, 1)")
      ->capture_default_str();
  app.add_option("--predictions", f.predictions, "write the test set's forecasts here (CSV, for tools/plot_forecast)")
      ->capture_default_str();
  tasks::add_common_flags(app, o);
  app.get_option("--train_size")->description("at most this many training windows, the latest (default: all)");
  app.get_option("--test_size")->description("at most this many test windows, the first (default: all)");
  return program::run("forecast", app, argc, argv, [&] { return run(task, f); });
}
