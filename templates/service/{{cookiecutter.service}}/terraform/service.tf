resource "kubernetes_service_v1" "app" {
  metadata {
    name      = var.service
    namespace = local.namespace
    labels    = local.labels
  }
  spec {
    type     = var.service_type
    selector = local.selector
    port {
      name        = "http"
      port        = 80
      target_port = "http"
      protocol    = "TCP"
    }
    # Open Inference over gRPC (HTTP/2 without TLS), through Envoy. A ClusterIP (or the L4
    # load balancer of var.service_type = "LoadBalancer") balances connections, not calls: one
    # HTTP/2 connection reaches one pod. Clients spread calls over several channels.
    port {
      name         = "grpc"
      port         = var.grpc_port
      target_port  = "grpc"
      protocol     = "TCP"
      app_protocol = "kubernetes.io/h2c"
    }
  }
}
