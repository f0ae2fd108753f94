module go.uber.org/zap

go 1.19

require go.uber.org/multierr v1.10.0
