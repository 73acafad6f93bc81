"""Deploy-time tools: rules → Grafana alerts / PrometheusRule, the dashboard generator."""
