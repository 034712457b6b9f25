resource "kubernetes_config_map_v1" "envoy" {
  metadata {
    name      = "${var.service}-envoy"
    namespace = local.namespace
    labels    = local.labels
  }
  data = {
    # envoy/envoy.yaml names the default collector and sampling; these variables replace them.
    "envoy.yaml" = replace(
      replace(
        file("${path.module}/../envoy/envoy.yaml"),
        "otel-collector.observability.svc.cluster.local",
        var.otel_collector_host,
      ),
      "random_sampling: {value: 1}",
      "random_sampling: {value: ${var.trace_sampling_percent}}",
    )
  }
}

resource "kubernetes_deployment_v1" "app" {
  metadata {
    name      = var.service
    namespace = local.namespace
    labels    = local.labels
    annotations = {
      "servinglib.dev/owners" = var.owners
      "servinglib.dev/models" = join(",", var.models)
    }
  }

  spec {
    replicas               = var.replicas
    revision_history_limit = 5
    selector {
      match_labels = local.selector
    }
    strategy {
      type = "RollingUpdate"
      rolling_update {
        max_surge       = "25%"
        max_unavailable = "0"
      }
    }

    template {
      metadata {
        labels = local.labels
        annotations = {
          "prometheus.io/scrape" = "true"
          "prometheus.io/port"   = "{{ cookiecutter.envoy_port }}"
          "prometheus.io/path"   = "/metrics"
          # A changed Envoy config rolls the pods.
          "servinglib.dev/envoy-config-sha256" = sha256(kubernetes_config_map_v1.envoy.data["envoy.yaml"])
        }
      }

      spec {
        # preStop sleeps (Envoy 25 s) + gunicorn's graceful timeout ({{ cookiecutter.graceful_timeout_s }} s) fit inside it.
        termination_grace_period_seconds = 60
        security_context {
          run_as_non_root = true
          seccomp_profile {
            type = "RuntimeDefault"
          }
        }

        container {
          name  = "app"
          image = var.image
          port {
            name           = "app"
            container_port = {{ cookiecutter.app_port }}
          }
          port {
            name           = "grpc"
            container_port = {{ cookiecutter.app_grpc_port }}
          }
          env {
            name  = "SERVINGLIB_HOST"
            value = "0.0.0.0"
          }
          env {
            name  = "SERVINGLIB_WORKERS"
            value = tostring(var.workers)
          }
          # servinglib's spans join Envoy's traces (servinglib[tracing], in requirements.txt).
          env {
            name  = "OTEL_EXPORTER_OTLP_ENDPOINT"
            value = "http://${var.otel_collector_host}:4318"
          }
          env {
            name  = "OTEL_SERVICE_NAME"
            value = var.service
          }
          resources {
            requests = {
              cpu    = var.cpu_request
              memory = var.memory_request
            }
            limits = {
              cpu    = var.cpu_limit
              memory = var.memory_limit
            }
          }
          # The kubelet probes the app's gRPC port (grpc.health.v1, server.grpc_port); the
          # REST port is probed through Envoy (the envoy container's readiness probe).
          # Workers load and self-test every model before they accept a connection, so
          # the first answer comes once loading is done: allow it 5 minutes.
          startup_probe {
            grpc {
              port    = {{ cookiecutter.app_grpc_port }}
              service = "liveness"
            }
            period_seconds    = 5
            failure_threshold = 60
          }
          # Ready when every model's default version is READY (the health of service "").
          readiness_probe {
            grpc {
              port = {{ cookiecutter.app_grpc_port }}
            }
            period_seconds    = 5
            timeout_seconds   = 2
            failure_threshold = 2
          }
          # Liveness never depends on models (service "liveness"): a failed model must not
          # restart the pod.
          liveness_probe {
            grpc {
              port    = {{ cookiecutter.app_grpc_port }}
              service = "liveness"
            }
            period_seconds    = 10
            timeout_seconds   = 2
            failure_threshold = 3
          }
          lifecycle {
            # Keep serving while the pod is removed from the Service's endpoints.
            pre_stop {
              exec {
                command = ["sleep", "10"]
              }
            }
          }
          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            run_as_user                = 10001
            run_as_group               = 10001
            capabilities {
              drop = ["ALL"]
            }
          }
          volume_mount {
            name       = "tmp"
            mount_path = "/tmp"
          }
        }

        container {
          name    = "envoy"
          image   = var.envoy_image
          command = ["envoy"]
          args    = ["--config-path", "/etc/envoy/envoy.yaml", "--log-level", "warn"]
          port {
            name           = "http"
            container_port = {{ cookiecutter.envoy_port }}
          }
          port {
            name           = "grpc"
            container_port = {{ cookiecutter.envoy_grpc_port }}
          }
          resources {
            requests = {
              cpu    = "100m"
              memory = "64Mi"
            }
            limits = {
              cpu    = "1"
              memory = "256Mi"
            }
          }
          # Through Envoy to the app: ready when both are.
          readiness_probe {
            http_get {
              path = "/readyz"
              port = "http"
            }
            period_seconds    = 5
            timeout_seconds   = 2
            failure_threshold = 2
          }
          liveness_probe {
            tcp_socket {
              port = "http"
            }
            period_seconds    = 10
            failure_threshold = 3
          }
          lifecycle {
            # Outlive the app's drain: endpoint removal (10 s) + the longest request (route timeout).
            pre_stop {
              exec {
                command = ["sleep", "25"]
              }
            }
          }
          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            run_as_user                = 101
            run_as_group               = 101
            capabilities {
              drop = ["ALL"]
            }
          }
          volume_mount {
            name       = "envoy-config"
            mount_path = "/etc/envoy"
            read_only  = true
          }
        }

        volume {
          name = "tmp"
          empty_dir {}
        }
        volume {
          name = "envoy-config"
          config_map {
            name = kubernetes_config_map_v1.envoy.metadata[0].name
          }
        }
      }
    }
  }

  lifecycle {
    # After the first apply the autoscaler owns the replica count.
    ignore_changes = [spec[0].replicas]
  }
}
